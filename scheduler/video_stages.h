// Graph endpoints backed by video files: a source that cuts decoded frames into slices, and a
// sink that encodes the frames of each finished slice.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/pipeline.h"
#include "scheduler/progress.h"

namespace wm::sched {

// Maps stored pixel values on the way in (x * scale + bias) and out ((y - bias) / scale), e.g.
// [0,1] ↔ [-1,1] for the VAE.
struct ValueMap {
  float scale = 1.0f;
  float bias = 0.0f;
};

// Alpha planes of source frames by frame index, from the source to the sink around the model
// (models take RGB): the source puts the alpha of each frame it hands out, the sink takes it
// (resized to the output) for the frame it writes, or drops it with a dropped context frame.
// Holds what is in flight, so it is bounded like the slices are. Thread-safe.
class AlphaStore {
 public:
  void put(int64_t index, Planar alpha);
  Planar take(int64_t index);  // empty when there is none

 private:
  std::mutex mutex_;
  std::map<int64_t, Planar> planes_;
};

// Cuts frames [first_frame, end_frame) of a reader into slices under `rule`, padding the last
// slice by repeating its last frame when the rule's grouping requires it. A slice that stops at
// end_frame before the end of the stream is not the last one (farm chunks): not padded.
class VideoSliceSource : public SliceSource {
 public:
  VideoSliceSource(io::VideoReader& reader, const SliceRule& rule, ValueMap map = {},
                   int64_t first_frame = 0, int64_t end_frame = -1);
  bool next(SliceWork& out) override;
  int64_t frames_read() const { return frames_read_; }
  // Frames' alpha planes go to `store` (which must outlive the source and the sink).
  void set_alpha_store(AlphaStore* store) { alpha_ = store; }
  // The frames continue a sequence whose earlier slices a causal model has already seen (a farm
  // chunk resumed from a kept session or a saved state): no slice is the sequence's first, and
  // every slice has the rule's later slice length. (Slice indices still count from 0: the
  // pipeline's sequencer orders by them.)
  void continue_sequence() { continued_ = true; }

 private:
  AlphaStore* alpha_ = nullptr;
  bool fetch(io::VideoFrame& frame);
  io::VideoReader& reader_;
  SliceRule rule_;
  ValueMap map_;
  int64_t end_frame_;
  // Stopped at end_frame with frames left in the stream: the last slice is not the sequence's
  // last (a farm chunk), so it is neither marked last nor padded.
  bool cut_ = false;
  bool continued_ = false;
  int64_t next_index_ = 0;
  int64_t frames_read_ = 0;
  bool have_lookahead_ = false;
  io::VideoFrame lookahead_;
  int width_ = 0, height_ = 0;  // the first frame's: every frame must have them
};

// Writes each output frame of each slice. With `same_timing`, output frame i of a slice takes
// the pts of input frame i (models that keep the frame count); otherwise pts are generated as
// consecutive ticks from 0 in the writer's time base. Padding frames are dropped.
class VideoFileSink : public SliceSink {
 public:
  VideoFileSink(io::VideoWriter& writer, int width, int height, bool same_timing, ValueMap map = {},
                Progress* progress = nullptr);
  void write(SliceResult&& result) override;
  int64_t frames_written() const { return written_; }
  // Writes at most `frames` frames in all (a decode trimmed to the source's frame count; without
  // same_timing: no frame at or past output frame `frames`).
  void set_limit(int64_t frames) { limit_ = frames; }
  // Without same_timing: the first frame this sink gets is output frame `frame` (pts `frame`), for
  // a farm chunk whose model starts after the sequence's start; frames before write_from are
  // context, dropped.
  void set_first_frame(int64_t frame) { next_pts_ = frame; }
  // Farm chunks: frames whose source index is below `first_frame` are context, dropped (with
  // same_timing); `on_slice(slice index, frames written so far)` is called after each slice.
  void set_write_from(int64_t first_frame) { write_from_ = first_frame; }
  void set_on_slice(std::function<void(int64_t, int64_t)> on_slice) {
    on_slice_ = std::move(on_slice);
  }
  int64_t frames_dropped() const { return dropped_; }
  // With same_timing: each frame takes its source frame's alpha from `store`, resized.
  void set_alpha_store(AlphaStore* store) { alpha_ = store; }
  // Wall seconds spent making the frames' value-mapped copies (the writer's own time is
  // VideoWriter::seconds()).
  double extract_seconds() const { return extract_seconds_; }

 private:
  io::VideoWriter& writer_;
  int width_;
  int height_;
  bool same_timing_;
  ValueMap map_;
  Progress* progress_;
  int64_t written_ = 0;
  double extract_seconds_ = 0;
  int64_t next_pts_ = 0;
  int64_t limit_ = -1;
  int64_t write_from_ = 0;
  int64_t dropped_ = 0;
  std::function<void(int64_t, int64_t)> on_slice_;
  AlphaStore* alpha_ = nullptr;
};

// Copies frame t of `block` [C,T,H,W] into a [C,1,h,w] image (top-left crop when h,w smaller),
// mapping values back through `map`.
Planar extract_frame(const Planar& block, int t, int height, int width, ValueMap map = {});

}  // namespace wm::sched
