#include "tools/bench_encode_ceiling.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "io/video_reader.h"
#include "io/yuv_image.h"
#include "scheduler/progress.h"
#include "src/base/error.h"

namespace wm::bench {

// One decoded video: its pictures' planes copied out of the decoder (so none is shared with a
// decoder's pool), with their timing.
struct DecodedClip {
  std::string path;
  io::VideoInfo info;
  io::YuvImage shape;  // format, sizes, tags of the pictures (no data)
  std::vector<io::VideoFrame> timing;
  std::vector<std::vector<uint8_t>> planes;  // 3 per picture, rows packed
};

namespace {

using Clip = DecodedClip;

size_t row_bytes(const io::YuvImage& im, int p) {
  return size_t(im.plane_width(p)) * (im.depth > 8 ? 2 : 1);
}

Clip decode(const std::string& path) {
  Clip clip;
  clip.path = path;
  io::VideoReader reader(path);
  clip.info = reader.info();
  io::VideoFrame frame;
  io::YuvImage image;
  while (reader.read_yuv(frame, image)) {
    if (image.semi_planar) {
      throw Error(path + ": the encoder ceiling takes planar pictures only", kExitSoftware);
    }
    clip.shape = image;
    clip.shape.owner.reset();
    std::fill(std::begin(clip.shape.data), std::end(clip.shape.data), nullptr);
    for (int p = 0; p < 3; ++p) {
      const size_t row = row_bytes(image, p);
      std::vector<uint8_t> plane(row * size_t(image.plane_height(p)));
      for (int y = 0; y < image.plane_height(p); ++y) {
        std::memcpy(plane.data() + size_t(y) * row, image.data[p] + y * image.stride[p], row);
      }
      clip.planes.push_back(std::move(plane));
    }
    clip.timing.emplace_back();
    clip.timing.back().index = frame.index;
    clip.timing.back().pts = frame.pts;
    clip.timing.back().duration = frame.duration;
  }
  return clip;
}

// A writer of `clip`'s size, timing and colour tags at `path`.
io::WriterConfig writer_config(const Clip& clip, const std::string& path,
                               const io::EncodeSettings& settings) {
  io::WriterConfig config;
  config.path = path;
  config.width = clip.info.width;
  config.height = clip.info.height;
  config.time_base = clip.info.time_base;
  config.frame_rate = clip.info.frame_rate;
  config.source = clip.info;
  config.encode = settings;
  return config;
}

// Feeds one clip to a writer at out_dir/STEM.mp4; the writer's finish() (the encoder's flush,
// commit) is left to the caller.
std::unique_ptr<io::VideoWriter> feed(const Clip& clip, const std::string& out_dir,
                                      const io::EncodeSettings& settings) {
  auto writer = std::make_unique<io::VideoWriter>(writer_config(
      clip, out_dir + "/" + std::filesystem::path(clip.path).stem().string() + ".mp4", settings));
  for (size_t i = 0; i < clip.timing.size(); ++i) {
    io::YuvImage out = writer->yuv_buffer();
    for (int p = 0; p < 3; ++p) {
      const size_t row = row_bytes(out, p);
      const uint8_t* src = clip.planes[3 * i + size_t(p)].data();
      for (int y = 0; y < out.plane_height(p); ++y) {
        std::memcpy(out.data[p] + y * out.stride[p], src + size_t(y) * row, row);
      }
    }
    writer->write_yuv(clip.timing[i], out);
  }
  return writer;
}

// Runs work(i, lane) for i in [0, count) on `lanes` threads (lane: the thread's number), each
// taking the next index as it frees up, then done(lane) on each thread; the first exception stops
// the others taking more and is rethrown.
void in_lanes(size_t count, int lanes, const std::function<void(size_t, size_t)>& work,
              const std::function<void(size_t)>& done = {}) {
  std::mutex mutex;
  size_t next = 0;
  std::exception_ptr failure;
  std::vector<std::thread> threads;
  for (int lane = 0; lane < std::max(1, std::min(lanes, int(count))); ++lane) {
    threads.emplace_back([&, lane] {
      for (;;) {
        size_t at;
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (next >= count || failure) break;
          at = next++;
        }
        try {
          work(at, size_t(lane));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!failure) failure = std::current_exception();
        }
      }
      try {
        if (done) done(size_t(lane));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

DecodedVideos decode_videos(const std::vector<std::string>& videos, int threads) {
  DecodedVideos decoded;
  decoded.clips.resize(videos.size());
  in_lanes(videos.size(), threads, [&](size_t i, size_t) {
    decoded.clips[i] = std::make_shared<const Clip>(decode(videos[i]));
  });
  return decoded;
}

EncodeCeiling encode_ceiling(const DecodedVideos& videos, const std::string& out_dir, int lanes,
                             const io::EncodeSettings& settings) {
  EncodeCeiling result;
  result.lanes = std::max(1, std::min(lanes, int(videos.clips.size())));
  std::vector<const Clip*> clips;
  for (const auto& clip : videos.clips) clips.push_back(clip.get());
  std::filesystem::create_directories(out_dir);
  // The encoder must take the pictures as they are (no conversion timed): ask a writer of the
  // first clip's settings before timing.
  for (const Clip* clip : clips) {
    if (clip->timing.empty()) continue;
    io::VideoWriter writer(writer_config(*clip, out_dir + "/.probe.mp4", settings));
    const io::YuvImage& s = clip->shape;
    io::YuvImage buffer = writer.yuv_buffer();
    if (!writer.accepts_yuv(s.format, s.colorspace, s.color_range, clip->info.height) ||
        buffer.width != s.width || buffer.height != s.height) {
      result.skipped = clip->path + ": the encoder does not take its pictures as they are";
      return result;
    }
  }
  std::mutex mutex;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = wm::sched::process_cpu_seconds();
  // As a job's input lanes do, a lane feeds its next clip while the last one's encoder drains
  // (x264 holds a short clip's last frames until its flush).
  std::vector<std::future<int64_t>> finishing(size_t(result.lanes));
  auto settle = [&](size_t lane) {
    if (!finishing[lane].valid()) return;
    const int64_t written = finishing[lane].get();
    std::lock_guard<std::mutex> lock(mutex);
    result.frames += written;
  };
  in_lanes(
      clips.size(), result.lanes,
      [&](size_t i, size_t lane) {
        std::shared_ptr<io::VideoWriter> writer = feed(*clips[i], out_dir, settings);
        settle(lane);
        finishing[lane] = std::async(std::launch::async, [writer] { return writer->finish(); });
      },
      settle);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.cpu_seconds = wm::sched::process_cpu_seconds() - cpu_start;
  return result;
}

}  // namespace wm::bench
