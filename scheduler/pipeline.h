// The per-job flow graph (oneTBB):
//
//   source (serial) ─► limiter (tokens) ─► tiler (serial) ─► model (async: one call per session
//     at a time, on its device worker) ─► blender (serial) ─► sequencer (slice order)
//     ─► sink (serial) ─┐
//          ▲──────────── token returned ◄──────────┘
//
// Stages talk only through the graph; no graph thread waits for a model call. The limiter caps the
// slices in flight, so memory is bounded by `tokens` slices (plus the one the source node holds
// ready while the limiter is full) whatever the video length. An exception in any node (or a failed
// model call) cancels the graph and is rethrown by run_pipeline() after the graph has drained and
// every call returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "src/base/planar.h"
#include "src/geometry.h"
#include "src/model.h"

namespace wm::sched {

struct FrameMeta {
  int64_t index = 0;  // frame index in the source
  int64_t pts = 0;    // in the source's time base
  int64_t duration = 0;
};

// One temporal slice on its way through the graph.
struct SliceWork {
  int64_t index = 0;
  bool first = true;  // holds sequence frame 0
  bool last = false;
  Planar input;                   // [C, T, H, W] model input (padding frames included)
  std::vector<FrameMeta> frames;  // the real frames of this slice (without padding)
  int padded = 0;                 // frames appended by repeating the last one
  // Leading frames the slice repeats from the one before (ModelTraits::slice_overlap; in
  // `frames` too): scheduler/slice_overlap.h cross-fades their two outputs.
  int overlap = 0;
};

struct SliceResult {
  int64_t index = 0;
  bool first = true;
  bool last = false;
  Planar output;                  // [C', T', H', W'] blended model output
  std::vector<FrameMeta> frames;  // metadata of the input frames of the slice
  int padded = 0;
  int overlap = 0;  // as SliceWork::overlap
};

// Produces slices in order; called from one thread at a time. Returns false when done.
class SliceSource {
 public:
  virtual ~SliceSource() = default;
  virtual bool next(SliceWork& out) = 0;
};

// Consumes results in slice order; called from one thread at a time.
class SliceSink {
 public:
  virtual ~SliceSink() = default;
  virtual void write(SliceResult&& result) = 0;
};

// Where the time went: seconds spent inside each stage's body, summed over slices (stages run
// concurrently, so the sum can exceed the wall time).
struct PipelineStats {
  double source_seconds = 0;  // decode, conversion to float, slicing
  double tile_seconds = 0;    // cutting tiles
  double model_seconds = 0;   // model sessions (all workers)
  double blend_seconds = 0;   // blending tiles into slices
  double sink_seconds = 0;    // conversion from float, encode, mux
  double wall_seconds = 0;    // run_pipeline from start to end
  double drain_seconds = 0;   // from the end of the last model call to the end (blend + sink)
  int64_t slices = 0;
};

struct PipelineOptions {
  int tokens = 3;                             // slices in flight
  TilePlan tiles;                             // spatial plan (one tile = whole frame)
  const std::atomic<bool>* cancel = nullptr;  // set → the source stops with wm::Cancelled
  PipelineStats* stats = nullptr;             // filled when set
  // Session i's device (none given: the CPU); sessions run on parallel::device_worker(device,
  // lane), lane k for the k-th session on a device.
  std::vector<Device> devices;
};

// Runs the graph until the source is exhausted. `sessions` are the model workers (one per
// device/stream); a model with causal state gets exactly one so slices run in order. Session i
// runs on its device worker (PipelineOptions::devices), whichever graph thread hands it its slice.
void run_pipeline(SliceSource& source, std::vector<std::unique_ptr<ModelSession>>& sessions,
                  SliceSink& sink, const PipelineOptions& options);

// Copies the window of `tile` out of a slice input [C,T,H,W].
Planar crop_window(const Planar& input, const TileRect& tile);
// Adds the part of `tile_output` (the model output of the tile's window) that covers the tile's
// region into `out`, weighted by the plan's blend weights.
void blend_tile(const TilePlan& plan, const TileRect& tile, const Planar& tile_output, Planar& out);

}  // namespace wm::sched
