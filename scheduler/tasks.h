// Task runners: what a job does with each input (upscale, decode_latents, encode_latents,
// reconstruct). A runner is built once per job (models loaded once) and processes inputs one
// after another.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/device_worker.h"
#include "parallel/rank_fault.h"
#include "parallel/sequence_parallel.h"
#include "parallel/thread_budget.h"
#include "scheduler/pipeline.h"
#include "scheduler/progress.h"
#include "scheduler/runner.h"
#include "src/geometry.h"
#include "src/job_spec.h"
#include "src/model.h"

namespace wm::sched {

// What one input gave: the frames written and the measurements for the report.
struct TaskResult {
  int64_t frames = 0;
  std::map<std::string, double> metrics;
  std::string decoder;        // as TaskRunner::decoder()
  double finish_seconds = 0;  // the output's last step, where PendingOutput ran it
  // What the output could not hold of its source, one line each (VideoWriter::dropped()).
  std::vector<std::string> dropped{};
  std::string bound{};  // what bounded the input's speed, one line (the device frame path says)
};

// An input's output that may still be finishing (the encoder's flush, fsync, verify, rename) on
// a thread of its own. wait() returns once the output is final, or throws the finish's failure
// (which leaves no file at the output); the destructor waits too.
class PendingOutput {
 public:
  explicit PendingOutput(TaskResult done) : done_(std::move(done)) {}
  explicit PendingOutput(std::future<TaskResult> finishing) : finishing_(std::move(finishing)) {}
  TaskResult wait() { return done_ ? *done_ : finishing_.get(); }

 private:
  std::optional<TaskResult> done_;
  std::future<TaskResult> finishing_;
};

class ModelSet;

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Processes `input` into `output` (the output path has been checked). Returns the frames
  // written. Throws wm::Error; leaves no file at `output` on failure.
  virtual int64_t process(const std::string& input, const std::string& output,
                          const RunOptions& options, Progress& progress) = 0;
  // Measurements of the last process() call (e.g. PSNR/SSIM for reconstruct) for the report.
  virtual std::map<std::string, double> metrics() const { return {}; }
  // The video decoder the last process() call used ("h264", "h264 (nvdec)"); empty when it read
  // no video or does not say.
  virtual std::string decoder() const { return {}; }
  // What the last process() call's output could not hold of its source (one line each).
  virtual std::vector<std::string> dropped() const { return {}; }
  // What bounded the last process() call's speed, one line; empty when the runner does not say.
  virtual std::string bound() const { return {}; }
  // The runner's models when it has one set of them (run_job reads how many inputs it may run at
  // once from it); null otherwise (the runner's inputs then run one after another).
  virtual const ModelSet* model_set() const { return nullptr; }
  // process(), but the output's last step may still be running when it returns, so that the
  // job's next input starts its model work meanwhile (run_job). Progress has ended for the input.
  // The default finishes before it returns.
  virtual PendingOutput start(const std::string& input, const std::string& output,
                              const RunOptions& options, Progress& progress) {
    const int64_t frames = process(input, output, options, progress);
    TaskResult result{frames, metrics(), decoder()};
    result.dropped = dropped();
    result.bound = bound();
    return PendingOutput(std::move(result));
  }
};

// A runner whose output's last step can run in the background: process() and start() are both
// run(), which finishes before it returns unless `background`.
class FinishingRunner : public TaskRunner {
 public:
  int64_t process(const std::string& input, const std::string& output, const RunOptions& options,
                  Progress& progress) final {
    last_ = {};
    last_ = run(input, output, options, progress, /*background=*/false).wait();
    return last_.frames;
  }
  PendingOutput start(const std::string& input, const std::string& output,
                      const RunOptions& options, Progress& progress) final {
    return run(input, output, options, progress, /*background=*/true);
  }
  std::map<std::string, double> metrics() const override { return last_.metrics; }
  std::string decoder() const override { return last_.decoder; }
  std::vector<std::string> dropped() const override { return last_.dropped; }
  std::string bound() const override { return last_.bound; }

 protected:
  virtual PendingOutput run(const std::string& input, const std::string& output,
                            const RunOptions& options, Progress& progress, bool background) = 0;

 private:
  TaskResult last_;  // of the last process()
};

// The last step of a video output: writer->finish() (encoder flush, fsync, verify, rename), then
// `check(frames)` (may throw); `partial` gets the frames and the writer's finish seconds
// (writer_flush_seconds, writer_commit_seconds, writer_finish_seconds). On a thread of its own
// when `background`, else before it returns.
PendingOutput finish_video(std::unique_ptr<io::VideoWriter> writer, TaskResult partial,
                           bool background, std::function<void(int64_t)> check = {});

std::unique_ptr<TaskRunner> make_task_runner(const JobSpec& job);

// The models of a job, one per device, and their sessions. `parallel` says how the devices (or
// in-process CPU ranks) share the work: data (a session per rank; one for a causal model, whose
// slices must run in order) or sequence (one sequence-parallel session over all ranks).
// The job's rank r runs on device r mod n (n devices), worker lane r / n; an input lane's set
// (ParallelSpec::first_rank, lane_ranks; run_job) holds a window of those ranks. Sets built while
// a ModelShelf is in use share its models (one per device) and its fault injection.
// Throws wm::Error (kExitDataErr) for sequence parallelism with a model that cannot do it.
class ModelSet {
 public:
  ModelSet(const ModelConfig& config, const std::string& devices, const std::vector<int>& ids,
           const ParallelSpec& parallel = {});
  const Model& model() const { return *models_.front(); }
  const ModelTraits& traits() const { return models_.front()->traits(); }
  // Fresh sessions for one input: one per rank, a single one for causal models, or one
  // sequence-parallel session. Each places its calls on its rank's device worker
  // (parallel::PlacedSession).
  std::vector<std::unique_ptr<ModelSession>> open_sessions() const;
  // The device of each session open_sessions() makes (PipelineOptions::devices).
  std::vector<Device> session_devices() const;
  // The devices this set's ranks use, in rank order, without repeats.
  const std::vector<Device>& devices() const { return devices_; }
  int ranks() const { return int(slots_.size()); }
  // The job's ranks (all input lanes), as resolved: GPUs in data mode at most one per device.
  int job_ranks() const { return job_ranks_; }
  bool sequence_parallel() const { return sequence_; }
  // With sequence_parallel(): how its session splits slices (time, rows, or auto per video).
  parallel::SplitBy split() const { return split_; }
  // Spatial parallelism (mode spatial) on an input of `tiles` (model input pixels, latent rows
  // for a decode): throws wm::Error (kExitDataErr) naming the job file when a tile has fewer
  // than 2 rows per rank. (Auto takes rows only where they fit: parallel::choose_split.)
  void check_rows(const JobSpec& job, const std::string& input, const TilePlan& tiles) const;
  // The device workers its sessions run on: the pipeline's lanes, or the ranks of a
  // sequence-parallel session.
  std::vector<parallel::DeviceWorker*> workers() const;
  // The model of rank i (in the order of workers()).
  const Model& rank_model(size_t i) const { return *models_[slots_[i].model]; }

 private:
  struct Slot {
    Device device;
    int lane = 0;      // the device worker's lane
    int rank = 0;      // the job's rank number
    size_t model = 0;  // index into models_
  };
  std::vector<Device> devices_;
  std::vector<std::shared_ptr<const Model>> models_;  // one per entry of devices_
  std::vector<Slot> slots_;
  int job_ranks_ = 1;
  bool sequence_ = false;
  parallel::SplitBy split_ = parallel::SplitBy::kTime;
  ParallelSpec parallel_;
  std::shared_ptr<parallel::Fault> fault_;  // null: none armed
};

// While in use (one scope, one thread: run_job building a job's input lanes), ModelSets built on
// this thread take their models from the shelf (built once per device and model task) and share
// one fault injection, so input lanes on one device share its weights.
class ModelShelf {
 public:
  ModelShelf();
  ~ModelShelf();
  ModelShelf(const ModelShelf&) = delete;
  ModelShelf& operator=(const ModelShelf&) = delete;

 private:
  friend class ModelSet;
  std::map<std::string, std::shared_ptr<const Model>> models_;
  std::map<std::string, std::shared_ptr<parallel::Fault>> faults_;
  ModelShelf* previous_;
};

// What the devices did for one input, as report metrics: per worker "device_<dev>_busy_seconds",
// "device_<dev>_frames" (output frames it made; a spatial rank counts its band of every frame)
// and "device_<dev>_peak_mib" (CUDA: the allocator's peak since the process started), <dev> like
// "cuda0" or "cuda0.1" (lane 1); a sequence-parallel session adds "exchange_bytes",
// "exchange_wait_seconds" and how many slices it split in time and by rows
// ("parallel_sequence_slices", "parallel_spatial_slices"; "parallel_solo_slices": those of the
// time split run on one rank alone). Made before the input's pipeline runs.
class DeviceMeter {
 public:
  explicit DeviceMeter(const ModelSet& models);
  std::map<std::string, double> metrics(
      const std::vector<std::unique_ptr<ModelSession>>& sessions) const;

 private:
  std::vector<parallel::DeviceWorker*> workers_;
  std::vector<parallel::WorkerStats> before_;
};

// The tile plan a job asks for on an input of width×height (input pixels of the model).
TilePlan plan_job_tiles(const JobSpec& job, const ModelTraits& traits, int width, int height);

// The slice rule of a job for a model whose output frames are out_width×out_height: the job's
// slice_frames, or auto_slice_frames when it is 0, grouped as the model needs.
SliceRule job_slice_rule(const JobSpec& job, const ModelTraits& traits, int out_width,
                         int out_height);

// Latent frames per decode_latents slice: the job's slice_frames, or auto_decode_slice_frames
// when it is 0 (a GPU: devices other than cpu, read from the job so that every farm process
// cuts the same slices).
int decode_slice_frames(const JobSpec& job);

// The reader options for a job's inputs: its max_error_rate and its `decode:` mode on
// `devices` (the job's resolved devices): nvdec uses the first CUDA device (GPU 0 when there is
// none), auto asks for NVDEC only when there is one. Decoder and conversion threads from the
// host thread budget of `run`'s lanes (parallel/thread_budget.h).
io::ReaderOptions reader_options(const JobSpec& job, const std::vector<Device>& devices,
                                 const RunOptions& run);

// The writer's encoder settings for a job's `encode:` map, for a model on `devices` (the job's
// resolved devices): with a GPU among them the encoder's threads run nicer (EncodeSettings::nice).
// The job's `threads`, else the host thread budget of `run`'s lanes (parallel/thread_budget.h);
// conversion threads from that budget.
io::EncodeSettings encode_settings(const EncodeSpec& spec, const std::vector<Device>& devices,
                                   const RunOptions& run);

// The host thread budget of one input run with `run` (its lanes) on this host.
parallel::ThreadBudget input_thread_budget(const RunOptions& run);

// The frame sizes of an input and its output as report metrics ("input_width", "input_height",
// "output_width", "output_height"; runner.h, InputOutcome::metrics).
void add_size_metrics(TaskResult& result, int input_width, int input_height, int output_width,
                      int output_height);

// Per-stage seconds as report metrics ("stage_model_seconds", ...).
std::map<std::string, double> stage_metrics(const PipelineStats& stats);

// The upscale task on a .safetensors input ([N,3,H,W] or [3,H,W] frames) into a .safetensors
// output (raw model values); task_upscale_tensor.cpp. Throws ConfigError when `output` is not a
// .safetensors file.
TaskResult upscale_tensor(const JobSpec& job, const ModelSet& models, const std::string& input,
                          const std::string& output, const RunOptions& options, Progress& progress);

// The upscale task into images (task_images.cpp): `output` is one image (io::ImagePath::kImage,
// from a one-frame input) or a numbered sequence written into a folder renamed into place
// (io::SequenceFolder). Leaves nothing at the output on failure.
PendingOutput upscale_to_images(const JobSpec& job, const ModelSet& models,
                                const std::string& input, const std::string& output,
                                const RunOptions& options, Progress& progress, bool background);

// A job on a model that runs on named tensors (src/models/tensor_model.h), task_tensors.cpp:
// `input` (.safetensors) → `output` (.safetensors): task dit (the input's tensors as they are),
// or upscale (the tensor job.input_tensor); with job.debug_tensors every intermediate too.
TaskResult run_tensor_model(const JobSpec& job, const ModelSet& models, const std::string& input,
                            const std::string& output, Progress& progress);
// The runner of task dit (task_tensors.cpp).
std::unique_ptr<TaskRunner> make_tensor_task_runner(const JobSpec& job);

// Implemented in task_latents.cpp.
std::unique_ptr<TaskRunner> make_latent_task_runner(const JobSpec& job);

}  // namespace wm::sched
