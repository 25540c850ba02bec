// Where the device frame path's pictures go (PlaneSink): the output's one VideoWriter
// (WriterPlaneSink), or several encoder instances at once (SegmentEncoder) when one encoder
// cannot keep up with the device.
//
// SegmentEncoder cuts the frames into segments of `segment_frames` consecutive frames; segment s
// goes to instance s mod N, which encodes it with its own VideoWriter into a video-only file (a
// fresh encoder: it starts with an IDR frame, its GOPs closed, the source's pts kept) in a
// private folder beside the output, while the other instances encode theirs. finish() joins the
// segments by stream copy into the output with the source's audio, subtitles, chapters,
// attachments and cover art (io::concat_segments, the farm's assembly routine), which is written
// as "<output>.<pid>.partial", verified and renamed into place. Segment boundaries depend only
// on the frame count and the settings, so the output is the same bytes on every run with the same
// settings and threads. Against one encoder: the same frames, order and timestamps; each segment
// boundary is an IDR frame and the rate control starts afresh there (docs/performance.md gives
// the measured size and quality).
//
// Memory: each instance queues at most one segment of pictures (a picture keeps the frame path's
// pinned block alive until its encoder has taken it): write() blocks while the instance the frame
// goes to has a whole segment waiting.
//
// Threading: one producer calls write() and finish(); each instance is a thread of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "io/yuv_image.h"

namespace wm::sched {

class PlaneSink {
 public:
  virtual ~PlaneSink() = default;
  // The next frame, in order: `image` in the encoder's format and size (yuv_target()); its owner
  // is kept until the encoder is done with it. May block (the encoders' backpressure).
  virtual void write(const io::VideoFrame& timing, const io::YuvImage& image) = 0;
  // Wall seconds spent inside the encoders' calls so far, summed over instances.
  virtual double busy_seconds() const = 0;
  virtual int instances() const = 0;
};

// One VideoWriter (finish() is the caller's, as for every other path).
class WriterPlaneSink final : public PlaneSink {
 public:
  explicit WriterPlaneSink(io::VideoWriter& writer) : writer_(writer) {}
  void write(const io::VideoFrame& timing, const io::YuvImage& image) override;
  double busy_seconds() const override { return busy_; }
  int instances() const override { return 1; }

 private:
  io::VideoWriter& writer_;
  double busy_ = 0;
};

struct SegmentOptions {
  int instances = 2;
  int segment_frames = 48;
  const std::atomic<bool>* cancel = nullptr;  // set → finish() throws Cancelled
};

class SegmentEncoder final : public PlaneSink {
 public:
  // `config`: the output as one VideoWriter would write it (its encode.threads are each
  // instance's). Creates the segment folder; throws OutputError when it cannot.
  SegmentEncoder(const io::WriterConfig& config, const SegmentOptions& options);
  ~SegmentEncoder() override;  // stops the instances, removes the segments (and the folder)
  SegmentEncoder(const SegmentEncoder&) = delete;
  SegmentEncoder& operator=(const SegmentEncoder&) = delete;

  // Throws what an instance hit (the first error), after which nothing more is encoded.
  void write(const io::VideoFrame& timing, const io::YuvImage& image) override;
  double busy_seconds() const override;
  int instances() const override;
  // Waits for the instances, then joins the segments into the output. Returns the frames
  // written. Throws what an instance or the join hit (then nothing is at the output).
  int64_t finish();
  int64_t segments() const;
  // Seconds of finish(): the instances' last flushes, and the join.
  double flush_seconds() const;
  double join_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::sched
