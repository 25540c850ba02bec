// The device frame path of a video upscale job (a neural upscaler on GPUs): frames stay on the
// device between decoding and encoding (parallel/frame_path.h), and the host only decodes,
// copies decoded planes into pinned blocks, and encodes:
//
//   reader thread: decode (read_yuv) ─► pack the planes into a pinned input block ─► submit the
//     slice to a device worker (slice k on lane k mod L) ─┐   (`tokens` slices queued at most)
//   device worker: upload ─► YUV→RGB ─► model ─► RGB→YUV ─► download   (its own streams)
//   this thread: each slice in order ─► wait for its download ─► its pictures to the encoder(s)
//     (PlaneSink: one VideoWriter, or SegmentEncoder's instances)
//
// Every stage is metered (DeviceRunResult): busy seconds, its share of the wall time, the GPU's
// busy share from events on the device, and `bound`, one line naming the stage that bounds the
// job. docs/performance.md, "The device frame path".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/video_info.h"
#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/device_worker.h"
#include "parallel/frame_path.h"
#include "parallel/thread_budget.h"
#include "scheduler/progress.h"
#include "scheduler/segment_encode.h"
#include "scheduler/tasks.h"
#include "src/job_spec.h"
#include "src/model.h"

namespace wm::sched {

// Whether an input may take the device frame path: `frame_path` is not host; the model takes
// frames on its device (ModelTraits::device_frames); its sessions are data ranks on GPUs (any
// device with `frame_path: device`); no explicit tiles (`tiling: auto` is fine: calls are sized
// from free memory); no alpha; the source decodes to planar YUV, or to NV12/P010 on NVDEC; the
// encoder takes planar YUV as it is (VideoWriter::yuv_target). Otherwise `why` says what kept it
// off (for the log line naming the path that runs).
bool device_path_applies(const JobSpec& job, const ModelSet& models, const io::VideoInfo& source,
                         const io::VideoWriter& writer, std::string& why);

// The host's threads for one input on the device frame path, from its lane's cores in the host
// thread budget (parallel/thread_budget.h; one lane: all the host's cores): decoder threads
// (software decoding), encoder instances (`encode.instances`, auto: one per 8 cores, at most 4;
// one for outputs below 1280×720 and for the inputs of a batch on input lanes, whose encoders
// already run side by side) and each instance's encoder threads (the job's `threads`, else 1.5
// per core left after decoding, split between the instances).
struct HostBudget {
  int cores = 1;
  int decode_threads = 0;
  int instances = 1;
  int encoder_threads = 0;
};
HostBudget host_budget(const JobSpec& job, const parallel::ThreadBudget& threads, int out_width,
                       int out_height);

// Frames per encoder segment when `instances` encoders share one output of `frames` frames (0:
// not known): at most two seconds of frames (at least 24), and as many segments as make whole
// rounds of one segment per instance, as even as they come — so every instance starts within
// one segment of the first frame and they all finish together (with segments of two seconds
// each, 100 frames at 24 fps made segments of 48, 48 and 4 frames: the second instance started
// at frame 48 and the first had 52 frames to encode; now 4 × 25).
int segment_frames_for(const io::Rational& frame_rate, int64_t frames, int instances);

// One device lane: a model rank's model, its device and worker.
struct DeviceLane {
  const Model* model = nullptr;
  Device device;
  parallel::DeviceWorker* worker = nullptr;
};

struct DeviceRunOptions {
  int tokens = 3;        // slices queued on the devices at most
  int slice_frames = 4;  // frames per slice
  bool dither = true;
  int output_pix_fmt = -1;  // the encoder's AVPixelFormat (VideoWriter::YuvTarget::format)
  const std::atomic<bool>* cancel = nullptr;
  int64_t end_frame = -1;  // stop before this frame index (-1: the end of the stream)
  int64_t write_from = 0;  // frames below this index are read and dropped (farm context)
  std::function<void(int64_t slice, int64_t frames_written)> on_slice;
  Progress* progress = nullptr;
};

// Busy seconds per stage (summed over lanes and instances) and what they say.
struct DeviceRunResult {
  int64_t frames_read = 0;
  int64_t frames_written = 0;
  int64_t frames_dropped = 0;
  int64_t slices = 0;
  double wall = 0;
  double decode = 0;  // the reader thread in the decoder (NVDEC's copy to the host included)
  double stage = 0;   // the reader thread packing planes into pinned blocks
  double launch = 0;  // the device workers' threads launching slices (host side of the device)
  double upload = 0, convert = 0, model = 0, convert_back = 0, download = 0;  // GPU seconds
  double encode = 0;       // inside the encoders' calls (all instances)
  double wait_device = 0;  // this thread waiting for slices' downloads
  int lanes = 1;
  int instances = 1;
  bool gpu = true;  // the lanes are GPUs (on the CPU the device's seconds are host seconds, inside
                    // the launches)
  std::string input_format, output_format;  // YuvFormat::describe()
  // Busy share of each stage of the wall time (encode: of the instances' time; GPU: of the
  // lanes'), the GPU's busy share (its compute stream: conversions and model), and one line
  // naming the stage with the largest share.
  std::map<std::string, double> shares() const;
  double gpu_busy_share() const;
  std::string bound() const;
  // The report's metrics: stage_<name>_seconds, stage_<name>_share, gpu_busy_share, ...
  std::map<std::string, double> metrics() const;
};

// Reads `reader` from where it stands to its end (or options.end_frame), runs every frame through
// the lanes' frame paths (output pictures in `output`'s format; config.input is taken from the
// first frame) and writes them to `sink` in order. Throws Cancelled when options.cancel is set;
// InputError when a frame's format, size or colour tags differ from the first's; what a device
// or the encoder hit otherwise.
DeviceRunResult run_device_upscale(io::VideoReader& reader, PlaneSink& sink,
                                   const std::vector<DeviceLane>& lanes,
                                   const parallel::FramePathConfig& output,
                                   const DeviceRunOptions& options);

// The verdict once the encoders have finished: `bound` was said when the last frame went to them;
// when they needed more than a quarter of the job's time after that (short clips: x264's
// lookahead and frame threads drain, the last segment started late; seen: 2.4 s after a 0.96 s
// pipeline on an H200), the encoders bounded the job, whatever was busiest before.
std::string bound_after_finish(const std::string& bound, double pipeline_seconds,
                               double finish_seconds);

// The last step of an output encoded by several instances: SegmentEncoder::finish() (their last
// flushes, the join into the output), then `check(frames)`; `partial` gets the frames and
// writer_flush_seconds / writer_join_seconds / writer_finish_seconds. On a thread of its own
// when `background`, else before it returns.
PendingOutput finish_segments(std::unique_ptr<SegmentEncoder> encoder, TaskResult partial,
                              bool background, std::function<void(int64_t)> check = {});

}  // namespace wm::sched
