#include "scheduler/video_stages.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <tbb/parallel_for.h>

#include "src/base/error.h"
#include "src/models/resample/resize_plane.h"

namespace wm::sched {

void AlphaStore::put(int64_t index, Planar alpha) {
  std::lock_guard<std::mutex> lock(mutex_);
  planes_[index] = std::move(alpha);
}

Planar AlphaStore::take(int64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = planes_.find(index);
  if (it == planes_.end()) return {};
  Planar out = std::move(it->second);
  planes_.erase(it);
  return out;
}

VideoSliceSource::VideoSliceSource(io::VideoReader& reader, const SliceRule& rule, ValueMap map,
                                   int64_t first_frame, int64_t end_frame)
    : reader_(reader), rule_(rule), map_(map), end_frame_(end_frame) {
  if (first_frame > 0) reader_.seek_to_frame(first_frame);
}

bool VideoSliceSource::fetch(io::VideoFrame& frame) {
  if (have_lookahead_) {
    frame = std::move(lookahead_);
    have_lookahead_ = false;
    return true;
  }
  if (cut_ || !reader_.read(frame)) return false;
  if (end_frame_ >= 0 && frame.index >= end_frame_) {
    cut_ = true;
    return false;
  }
  // A slice is one block of one frame size: a stream whose size changes midway is refused, as
  // the YUV path refuses it (upscale_yuv.cpp), never copied out of bounds.
  if (width_ == 0) {
    width_ = frame.image.width;
    height_ = frame.image.height;
  } else if (frame.image.width != width_ || frame.image.height != height_) {
    throw InputError("frame " + std::to_string(frame.index) +
                     " changes the pixel format, size or colour tags of the video (" +
                     std::to_string(frame.image.width) + "x" + std::to_string(frame.image.height) +
                     " after " + std::to_string(width_) + "x" + std::to_string(height_) + ")");
  }
  return true;
}

bool VideoSliceSource::next(SliceWork& out) {
  const bool starts = next_index_ == 0 && !continued_;
  const int want = starts ? rule_.first_frames : rule_.slice_frames;
  std::vector<io::VideoFrame> frames;
  frames.reserve(want);
  io::VideoFrame frame;
  while (int(frames.size()) < want && fetch(frame)) frames.push_back(std::move(frame));
  if (frames.empty()) return false;
  // Look one frame ahead so the slice knows whether it is the last.
  if (fetch(lookahead_)) {
    have_lookahead_ = true;
  }
  out.index = next_index_;
  out.first = starts;
  out.last = !have_lookahead_ && !cut_;
  const int real = int(frames.size());
  out.padded = 0;
  if (out.last) out.padded = int(pad_frames(real, rule_.group, out.first ? rule_.offset : 0));
  const Planar& first = frames.front().image;
  const int c = first.channels, h = first.height, w = first.width;
  const bool identity = map_.scale == 1.0f && map_.bias == 0.0f;
  out.frames.clear();
  if (real == 1 && out.padded == 0 && identity) {
    out.input = std::move(frames.front().image);  // [C,1,H,W] is the slice: no copy
  } else {
    out.input = Planar(c, real + out.padded, h, w);
    for (int t = 0; t < real + out.padded; ++t) {
      const Planar& img = frames[std::min(t, real - 1)].image;
      for (int ch = 0; ch < c; ++ch) {
        const float* src = img.plane(ch, 0);
        float* dst = out.input.plane(ch, t);
        if (identity) {
          std::memcpy(dst, src, sizeof(float) * img.plane_size());
        } else {
          for (size_t i = 0; i < img.plane_size(); ++i) dst[i] = src[i] * map_.scale + map_.bias;
        }
      }
    }
  }
  for (io::VideoFrame& f : frames) {
    out.frames.push_back({f.index, f.pts, f.duration});
    if (alpha_ && !f.alpha.empty()) alpha_->put(f.index, std::move(f.alpha));
  }
  frames_read_ += real;
  ++next_index_;
  return true;
}

Planar extract_frame(const Planar& block, int t, int height, int width, ValueMap map) {
  Planar img(block.channels, 1, height, width);
  const bool identity = map.scale == 1.0f && map.bias == 0.0f;
  for (int c = 0; c < block.channels; ++c) {
    const float* src = block.plane(c, t);
    float* dst = img.plane(c, 0);
    for (int y = 0; y < height; ++y) {
      const float* s = src + size_t(y) * block.width;
      float* d = dst + size_t(y) * width;
      if (identity) {
        std::memcpy(d, s, sizeof(float) * width);
      } else {
        for (int x = 0; x < width; ++x) d[x] = (s[x] - map.bias) / map.scale;
      }
    }
  }
  return img;
}

VideoFileSink::VideoFileSink(io::VideoWriter& writer, int width, int height, bool same_timing,
                             ValueMap map, Progress* progress)
    : writer_(writer),
      width_(width),
      height_(height),
      same_timing_(same_timing),
      map_(map),
      progress_(progress) {}

void VideoFileSink::write(SliceResult&& result) {
  Planar& out = result.output;
  int frames = out.frames;
  if (same_timing_) {
    if (frames != int(result.frames.size()) + result.padded) {
      throw Error("model returned " + std::to_string(frames) + " frames for a slice of " +
                      std::to_string(result.frames.size() + result.padded),
                  kExitSoftware);
    }
    frames = int(result.frames.size());
  }
  if (limit_ >= 0) {
    const int64_t done = same_timing_ ? written_ : next_pts_;
    frames = int(std::min<int64_t>(frames, std::max<int64_t>(0, limit_ - done)));
  }
  // Frames go to the writer in groups: their value-mapped copies are made in parallel, and the
  // writer converts a group's frames in parallel too (the slice's last frames are what the job
  // waits for once the model is done).
  constexpr int kGroup = 8;
  const bool whole = out.frames == 1 && out.height == height_ && out.width == width_ &&
                     map_.scale == 1.0f && map_.bias == 0.0f;
  int64_t slice_written = 0;
  std::vector<io::VideoFrame> group;
  std::vector<int> sources;  // the slice frame of each group entry
  for (int t0 = 0; t0 < frames; t0 += kGroup) {
    group.clear();
    sources.clear();
    for (int t = t0; t < std::min(frames, t0 + kGroup); ++t) {
      if (same_timing_ && result.frames[t].index < write_from_) {
        ++dropped_;  // a farm chunk's context frame
        if (alpha_) alpha_->take(result.frames[t].index);
        continue;
      }
      io::VideoFrame f;
      if (same_timing_) {
        f.index = result.frames[t].index;
        f.pts = result.frames[t].pts;
        f.duration = result.frames[t].duration;
      } else {
        if (next_pts_ < write_from_) {
          ++next_pts_;
          ++dropped_;  // a farm chunk's context frame
          continue;
        }
        f.index = next_pts_;
        f.pts = next_pts_++;
        f.duration = 1;
      }
      group.push_back(std::move(f));
      sources.push_back(t);
    }
    if (whole && group.size() == 1) {
      // A one-frame slice that is already the frame to encode moves instead of copying (at 4K a
      // copy is 100 MB of memory traffic per frame).
      group[0].image = std::move(out);
    } else {
      const auto start = std::chrono::steady_clock::now();
      tbb::parallel_for(size_t(0), group.size(), [&](size_t i) {
        group[i].image = extract_frame(out, sources[i], height_, width_, map_);
      });
      extract_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (alpha_ && same_timing_) {
      tbb::parallel_for(size_t(0), group.size(), [&](size_t i) {
        const Planar alpha = alpha_->take(group[i].index);
        if (!alpha.empty()) {
          group[i].alpha = models::resize_plane_lanczos(alpha, width_, height_);
        }
      });
    }
    writer_.write_batch(group);
    written_ += int64_t(group.size());
    slice_written += int64_t(group.size());
  }
  if (progress_) progress_->add(slice_written);
  if (on_slice_) on_slice_(result.index, written_);
}

}  // namespace wm::sched
