// The built-in resamplers' YUV-native path for video upscale jobs: decoded frames stay in their
// planar YUV format, each plane is resampled at its own size in integer samples
// (src/models/resample/resample_yuv.h) and handed to the encoder as it is, with no RGB float
// frames, no colour conversions and no per-frame large allocations (the decoder's and the writer's
// buffer pools, per-thread scratch rows). The result is the RGB pipeline's up to its rounding and
// its clamping of colours outside RGB (docs/performance.md gives the measured difference).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/pipeline.h"
#include "scheduler/progress.h"
#include "src/job_spec.h"
#include "src/models/resample/resample.h"

namespace wm::sched {

// The kernel when a job's input may take the YUV-native path: the model is a built-in resampler
// (lanczos, bicubic) that runs on the CPU (one device, no `parallel:` ranks, no `decode: nvdec`),
// tiling is off, the source has no alpha and a planar YUV format whose chroma divides its size,
// and the writer takes that format at the scaled size with the same colour matrix and range
// (VideoWriter::accepts_yuv). Otherwise none: the RGB float pipeline runs.
std::optional<models::ResampleKernel> yuv_native_kernel(const JobSpec& job,
                                                        const std::vector<Device>& devices,
                                                        const io::VideoInfo& source,
                                                        const io::VideoWriter& writer);

struct YuvRunOptions {
  int tokens = 4;  // frames in flight
  const std::atomic<bool>* cancel = nullptr;
  int64_t end_frame = -1;  // stop before this frame index (-1: the end of the stream)
  int64_t write_from = 0;  // frames below this index are read and dropped (farm context)
  int slice_frames = 1;    // progress and on_slice move after every this many frames written
  std::function<void(int64_t slice, int64_t frames_written)> on_slice;
  Progress* progress = nullptr;
};

struct YuvRunResult {
  int64_t frames_read = 0;
  int64_t frames_written = 0;
  int64_t frames_dropped = 0;
  PipelineStats stats;  // source: decode; model: resampling; sink: encode and mux
};

// Reads `reader` from where it stands (a caller seeks first) to the end or options.end_frame,
// resamples every frame with `kernel` and writes it to `writer` (finish() is the caller's):
// decode in order, frames resampled in parallel, encoded in order. Throws Cancelled when
// options.cancel is set; Error when a frame's format, size or colour tags differ from the first's.
YuvRunResult run_yuv_upscale(io::VideoReader& reader, io::VideoWriter& writer,
                             const models::ResampleKernel& kernel, const YuvRunOptions& options);

}  // namespace wm::sched
