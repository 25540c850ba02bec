// Overlapping slices for models whose slices are independent batches that must agree at their
// seams (ModelTraits::slice_overlap: SeedVR2's temporal batches). The source repeats the last
// `overlap` frames of each slice at the start of the next (SliceWork::overlap says how many);
// the sink holds back each slice's last `overlap` output frames until the next slice's outputs
// of the same frames arrive, and writes their cross-fade: frame i of k shared frames takes
// weight (i + 1) / (k + 1) from the later slice. A frame is written once, in order, with its
// own pts; nothing of a slice waits on the next except those frames.
//
//   VideoSliceSource ─► OverlapSource ─► pipeline (slices run anywhere, in any order) ─►
//     sequencer ─► OverlapSink ─► VideoFileSink
//
// Threading: each wrapper is called from one thread at a time, like what it wraps.
#pragma once

#include <vector>

#include "scheduler/pipeline.h"

namespace wm::sched {

class OverlapSource : public SliceSource {
 public:
  // `inner` gives the new frames of each slice (no padding: a frame group of 1).
  OverlapSource(SliceSource& inner, int overlap);
  bool next(SliceWork& out) override;

 private:
  SliceSource& inner_;
  int overlap_;
  Planar tail_;                   // the last frames of the slice before, [C, k, H, W]
  std::vector<FrameMeta> metas_;  // and their metadata
};

class OverlapSink : public SliceSink {
 public:
  OverlapSink(SliceSink& inner, int overlap);
  // Throws wm::Error (kExitSoftware) when a slice's overlap does not match what is held.
  void write(SliceResult&& result) override;
  // Frames whose source index is `frame` or more are not passed on (a farm chunk's context after
  // its end); < 0: none held back.
  void set_end(int64_t frame) { end_ = frame; }
  // Frames passed on to the inner sink so far.
  int64_t frames_passed() const { return passed_; }

 private:
  SliceSink& inner_;
  int overlap_;
  Planar held_;  // outputs of the last frames of the slice before, [C, k, H', W']
  std::vector<FrameMeta> metas_;
  int64_t end_ = -1;
  int64_t passed_ = 0;
};

}  // namespace wm::sched
