#include "scheduler/slice_overlap.h"

#include <algorithm>
#include <cstring>

#include "src/base/error.h"

namespace wm::sched {
namespace {

// Frames [first, first + count) of `p` as a block of their own.
Planar frames_of(const Planar& p, int first, int count) {
  Planar out(p.channels, count, p.height, p.width);
  for (int c = 0; c < p.channels; ++c) {
    for (int t = 0; t < count; ++t) {
      std::memcpy(out.plane(c, t), p.plane(c, first + t), sizeof(float) * p.plane_size());
    }
  }
  return out;
}

// `a` then `b`, along time.
Planar join(const Planar& a, const Planar& b) {
  if (a.empty()) return frames_of(b, 0, b.frames);
  Planar out(a.channels, a.frames + b.frames, a.height, a.width);
  for (int c = 0; c < a.channels; ++c) {
    for (int t = 0; t < out.frames; ++t) {
      const float* src = t < a.frames ? a.plane(c, t) : b.plane(c, t - a.frames);
      std::memcpy(out.plane(c, t), src, sizeof(float) * a.plane_size());
    }
  }
  return out;
}

}  // namespace

OverlapSource::OverlapSource(SliceSource& inner, int overlap)
    : inner_(inner), overlap_(std::max(overlap, 0)) {}

bool OverlapSource::next(SliceWork& out) {
  SliceWork work;
  if (!inner_.next(work)) return false;
  const int real = int(work.frames.size());
  if (work.padded != 0) throw Error("overlapping slices must not be padded", kExitSoftware);
  out.index = work.index;
  out.first = work.first;
  out.last = work.last;
  out.padded = 0;
  out.overlap = tail_.empty() ? 0 : tail_.frames;
  out.input = tail_.empty() ? std::move(work.input) : join(tail_, work.input);
  out.frames = metas_;
  out.frames.insert(out.frames.end(), work.frames.begin(), work.frames.end());
  // The next slice starts with this one's last frames.
  const int keep = std::min<int>(overlap_, int(out.frames.size()));
  tail_ = keep > 0 && !out.last ? frames_of(out.input, out.input.frames - keep, keep) : Planar();
  metas_.assign(out.frames.end() - (tail_.empty() ? 0 : keep), out.frames.end());
  (void)real;
  return true;
}

OverlapSink::OverlapSink(SliceSink& inner, int overlap)
    : inner_(inner), overlap_(std::max(overlap, 0)) {}

void OverlapSink::write(SliceResult&& result) {
  const int n = int(result.frames.size());
  const int k = result.overlap;
  if (k != held_.frames || k > n ||
      (k > 0 && (result.frames.front().index != metas_.front().index ||
                 held_.height != result.output.height || held_.width != result.output.width))) {
    throw Error("slice " + std::to_string(result.index) + " overlaps " + std::to_string(k) +
                    " frames, the slice before left " + std::to_string(held_.frames),
                kExitSoftware);
  }
  Planar& out = result.output;
  // The shared frames: a cross-fade from the slice before to this one.
  for (int i = 0; i < k; ++i) {
    const float w = float(i + 1) / float(k + 1);
    for (int c = 0; c < out.channels; ++c) {
      const float* a = held_.plane(c, i);
      float* b = out.plane(c, i);
      for (size_t j = 0; j < out.plane_size(); ++j) b[j] = a[j] + w * (b[j] - a[j]);
    }
  }
  // This slice's last frames wait for the next one, unless it is the last.
  const int hold = result.last ? 0 : std::min(overlap_, n - k);
  held_ = hold > 0 ? frames_of(out, n - hold, hold) : Planar();
  metas_.assign(result.frames.end() - hold, result.frames.end());
  SliceResult emit;
  emit.index = result.index;
  emit.first = result.first;
  emit.last = result.last;
  emit.padded = 0;
  int pass = n - hold;
  if (end_ >= 0) {
    while (pass > 0 && result.frames[size_t(pass - 1)].index >= end_) --pass;
  }
  emit.frames.assign(result.frames.begin(), result.frames.begin() + pass);
  emit.output = pass == out.frames ? std::move(out) : frames_of(out, 0, pass);
  if (emit.frames.empty()) return;
  passed_ += pass;
  inner_.write(std::move(emit));
}

}  // namespace wm::sched
