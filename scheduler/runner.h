// The batch runner: runs job files in order, each job over all its inputs, and turns every
// failure into an outcome (state, one-line error, exit code) instead of an escaping exception.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel/thread_budget.h"
#include "scheduler/progress.h"
#include "src/job_spec.h"

namespace wm::sched {

// Causal models run as farm chunks (reconstruct; scheduler/farm.h): how a chunk's model state
// continues the previous chunk's, and where its own goes (scheduler/causal_state.h). The task
// runner fills the outcome fields; runners of other tasks ignore it.
struct CausalCarry {
  // The input and settings: a session the runner kept from its previous call continues only the
  // same sequence, and a state file only one saved for it.
  std::string sequence;
  std::string resume_from;   // a saved state ("": none)
  int64_t resume_size = -1;  // its size as recorded
  // The frame resume_from continues at (a slice boundary <= write_from_frame; frames from it to
  // write_from_frame are run again, not written); -1: write_from_frame.
  int64_t resume_next = -1;
  std::string save_to;  // where the state after the chunk's last frame goes ("": not saved)
  // Outcome: how the chunk started ("session": the kept one; "state": resume_from; "": from the
  // sequence's start, over the context frames), and the size of save_to once written (0: none).
  std::string resumed;
  int64_t saved_bytes = 0;
  double save_seconds = 0;  // spent exporting and writing save_to
};

struct RunOptions {
  ProgressStyle progress = ProgressStyle::kAuto;
  bool keep_going = true;   // process the remaining inputs after a failure
  std::string report_path;  // JSON summary (one object per job) when not empty
  const std::atomic<bool>* cancel = nullptr;
  // Farm chunk restriction (frames [first, end) of each input); end < 0: to the end.
  int64_t first_frame = 0;
  int64_t end_frame = -1;
  // Farm context (scheduler/farm.h): frames [first_frame, write_from_frame) are decoded and run
  // through the model, to rebuild a causal model's state, but not written (the sink drops them:
  // VideoFileSink::set_write_from). <= first_frame: no context.
  int64_t write_from_frame = 0;
  // Farm context after the chunk: frames [write_to_frame, end_frame) are read (models whose
  // slices overlap: the last slice's repeated frames) but not written. < 0: write to the end.
  int64_t write_to_frame = -1;
  // Called after each slice is written, with the slice index and the frames written so far (the
  // farm journal records them). Called from the sink's thread, one call at a time.
  std::function<void(int64_t slice, int64_t frames_written)> on_slice;
  // Writing a farm segment: video only (assemble muxes audio/subtitles from the source) and
  // exact container timestamps (WriterConfig::exact_timescale).
  bool segment = false;
  // Causal farm chunks: the model state carried between chunks (null: none).
  CausalCarry* carry = nullptr;
  // `wmbatch --devices`: replaces every job's `devices:` (cpu, auto, or GPU indices "0,1").
  std::string devices;
  // `wmbatch -y` / `-n`: replaces every job's `on_exists:` (overwrite / skip).
  std::optional<OnExists> on_exists;
  // Input lanes sharing the host's cores while this input runs (run_job sets it for a batch on
  // lanes): the input's host threads come from parallel::thread_budget(host cores, lanes).
  int lanes = 1;
};

enum class InputState { kDone, kSkipped, kFailed };
const char* to_string(InputState s);

struct InputOutcome {
  std::string input;
  std::string output;  // "pipe:1": standard output
  InputState state = InputState::kDone;
  int exit_code = 0;
  std::string error;  // one line, names the file
  int64_t frames = 0;
  double started = 0;  // seconds from the job's start to this input's (lanes run inputs at once)
  double seconds = 0;
  // Task measurements (reconstruct: psnr, ssim). The frame sizes, where the task knows them, are
  // "input_width", "input_height", "output_width", "output_height" (the report writes them as
  // the input's width/height and output_width/output_height).
  std::map<std::string, double> metrics;
  std::string decoder;  // the video decoder used ("h264", "h264 (nvdec)"); empty: none or unsaid
  std::vector<std::string> dropped;  // what the output could not hold of the input, one line each
  std::string bound;  // what bounded its speed, one line (device frame path); empty: unsaid
};

// The model a job ran, for the report: its kind, its weights file, the released name of that
// file (src/models/catalog.h; "" when none), its spatial scale (the model's own, once built;
// else the table's; 0: not known), its precision.
struct ModelSummary {
  std::string kind;
  std::string weights;
  std::string name;
  int scale = 0;
  std::string precision;
};
ModelSummary model_summary(const JobSpec& job);

struct JobOutcome {
  std::string job;
  std::string file;
  std::string task;
  ModelSummary model;
  std::vector<InputOutcome> inputs;
  int64_t frames = 0;
  double seconds = 0;
  double peak_rss_mib = 0;
  int input_lanes = 1;  // inputs run at once (at the most; docs/gpu.md "Batches across devices")
  // The host thread budget of each input at the most lanes (parallel/thread_budget.h).
  parallel::ThreadBudget threads;
  int exit_code = 0;  // first failure's code, 0 when all done or skipped
};

// Runs one validated job; never throws wm::Error (failures are in the outcome).
JobOutcome run_job(const JobSpec& job, const RunOptions& options, Progress& progress);

// Loads and validates every job file first (a bad file stops everything before any work, exit
// 65), then runs them in order. Returns the process exit code: 0, or the first failure's code.
int run_job_files(const std::vector<std::string>& files, const RunOptions& options,
                  std::vector<JobOutcome>* outcomes = nullptr);
// run_job_files for jobs already parsed (a one-line command's: src/job_command.h): the
// options' overrides, the checks made before any work (preflight), then the jobs in order.
int run_jobs(std::vector<JobSpec> jobs, const RunOptions& options,
             std::vector<JobOutcome>* outcomes = nullptr);

// Writes the outcomes as JSON (atomically: temp file, fsync, rename).
void write_report(const std::string& path, const std::vector<JobOutcome>& outcomes);

}  // namespace wm::sched
