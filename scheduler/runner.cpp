#include "scheduler/runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include <tbb/task_arena.h>

#include "io/image_output.h"
#include "io/output_file.h"
#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/devices.h"
#include "parallel/memory_budget.h"
#include "parallel/thread_budget.h"
#include "scheduler/input_lanes.h"
#include "scheduler/pipeline.h"
#include "scheduler/preflight.h"
#include "scheduler/tasks.h"
#include "scheduler/video_stages.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/json_text.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"
#include "src/base/thread_name.h"
#include "src/models/catalog.h"

namespace wm::sched {
namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Checks what must hold before any work on one input; returns false to skip it. The caller
// holds the output's lock (io::OutputLock), so the check sees any other process's finished file.
// `folder_output`: the output is a folder (an image sequence's, io::output_target).
bool prepare_output(const JobSpec& job, const std::string& input, const std::string& output,
                    bool folder_output) {
  if (fs::same_file(input, output)) {
    throw Error(output + ": output would overwrite its input", kExitDataErr);
  }
  struct stat st {};
  if (::stat(output.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && !folder_output) {
    throw OutputError(output + ": output is an existing folder", kExitCantCreat);
  }
  fs::remove_stale_temps(output);  // left by killed runs; nobody else writes it now
  if (file_exists(output)) {
    if (job.on_exists == OnExists::kSkip) return false;
    if (job.on_exists == OnExists::kFail) {
      throw OutputError(
          output +
              ": output exists (set on_exists: overwrite or skip; on the command line -y or -n)",
          kExitCantCreat);
    }
  }
  if (::access(fs::parent_dir(output).c_str(), W_OK) != 0) {
    throw OutputError(fs::parent_dir(output) + ": output folder is not writable", kExitCantCreat);
  }
  return true;
}

// The output's folder, made if missing (the lock file lives in it).
void make_output_folder(const std::string& output) {
  const std::string dir = fs::parent_dir(output);
  fs::make_dirs(dir);
  if (::access(dir.c_str(), W_OK) != 0) {
    throw OutputError(dir + ": output folder is not writable", kExitCantCreat);
  }
}

// The one line an interrupted input gets: which input, what became of its output, and the
// command that resumes the run.
std::string interrupted_text(const JobSpec& job, const std::string& input,
                             const std::string& output) {
  std::string command = "wmbatch " + job.file;
  if (job.file.find_first_of(" '\"$\\") != std::string::npos) {
    command = "wmbatch '" + job.file + "'";
  }
  if (!job.rerun.empty()) command = job.rerun;
  std::string text =
      input + ": interrupted; " +
      (output.empty() ? std::string("nothing was written") : output + " was not written") +
      "; resume with: " + command;
  if (job.on_exists == OnExists::kFail) {
    text += job.rerun.empty()
                ? " (with on_exists: skip in the job, the outputs already done are kept)"
                : " -n (the outputs already done are kept)";
  }
  return text;
}

// Whether `text` is a report write_report wrote: a JSON list of jobs, each an object with
// "job", "file", "task" and a list of "inputs" (a job file in JSON form has none of these keys).
bool is_report(const std::string& text) {
  nlohmann::json j;
  try {
    j = json_parse(text);
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  if (!j.is_array()) return false;
  return std::all_of(j.begin(), j.end(), [](const nlohmann::json& job) {
    return job.is_object() && job.contains("job") && job.contains("file") && job.contains("task") &&
           job.contains("inputs") && job["inputs"].is_array();
  });
}

// What is at the report path already, when it may not be replaced: a file that is not a previous
// report, or not a file. `wmbatch --report *.yaml` (the shell's `--report a.yaml b.yaml`) would
// otherwise replace the job file a.yaml with JSON. Absent and empty files are fine.
std::optional<std::string> report_path_taken(const std::string& report) {
  constexpr size_t kMaxReportBytes = size_t(256) << 20;
  struct stat st {};
  if (::stat(report.c_str(), &st) != 0) return std::nullopt;  // written fresh (or fails then)
  if (S_ISDIR(st.st_mode)) return "is a folder";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_size == 0) return std::nullopt;
  if (size_t(st.st_size) > kMaxReportBytes) return "exists and is not a wmbatch report";
  std::ifstream in(report, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.bad() && is_report(text)) return std::nullopt;
  return "exists and is not a wmbatch report (a JSON list of jobs)";
}

// --report FILE must not name a file the run reads (a job file, an input): it would be
// overwritten at the end; a file already there must be a previous report. Throws
// Error(kExitUsage).
void check_report_path(const std::string& report, const std::vector<JobSpec>& jobs) {
  auto refuse = [&](const std::string& what, const std::string& path) {
    throw Error("--report " + report + ": is " + what + " " + path +
                    " of this run; give another file (it would be overwritten)",
                kExitUsage);
  };
  for (const JobSpec& job : jobs) {
    if (fs::same_file(report, job.file)) refuse("the job file", job.file);
    std::vector<std::string> inputs;
    try {
      inputs = expand_inputs(job);
    } catch (const Error&) {
      continue;  // reported when the job runs
    }
    for (const std::string& input : inputs) {
      if (fs::same_file(report, input)) refuse("the input", input);
    }
  }
  // Then anything else already there (after the job files and inputs: naming those says more).
  if (const auto taken = report_path_taken(report)) {
    throw Error("--report " + report + ": " + *taken +
                    "; it is not replaced. Give a new file or a previous report (did the shell "
                    "expand `--report *.yaml` into a job file?)",
                kExitUsage);
  }
}

// How many inputs of a batch run at once (input lanes, docs/gpu.md "Batches across devices"):
// the job's `parallel.inputs`, else one per rank in data mode and one in sequence mode; at most
// the batch. 1 for runners without one model set.
int input_lanes(const JobSpec& job, const TaskRunner& runner, size_t batch) {
  const ModelSet* models = runner.model_set();
  if (!models || batch < 2) return 1;
  const int want = job.parallel.inputs > 0       ? job.parallel.inputs
                   : models->sequence_parallel() ? 1
                                                 : models->job_ranks();
  return int(std::min<size_t>(size_t(std::max(want, 1)), batch));
}

// Whether a batch may add input lanes once its first input is done (input_lanes.h): `inputs` left
// to auto, a frame-wise model (no causal state) in data mode, every device a GPU, more inputs
// than ranks, host cores for more than one lane per device.
bool lanes_may_grow(const JobSpec& job, const TaskRunner& runner, size_t batch) {
  const ModelSet* models = runner.model_set();
  if (!models || job.parallel.inputs > 0 || models->sequence_parallel() ||
      models->traits().causal_state || batch <= size_t(models->job_ranks())) {
    return false;
  }
  for (const Device& d : models->devices()) {
    if (d.kind != Device::Kind::kCuda) return false;
  }
  // Too few host cores for a second lane per device, whatever the memory: the batch keeps the
  // sequential loop (which overlaps each output's finish with the next input).
  const int cores = int(std::thread::hardware_concurrency());
  return lanes_per_device(INT64_MAX, 1, 1, cores, int(models->devices().size())) > 1;
}

// Input lane `lane` of `lanes` over the job's `ranks` ranks: a window of them, or (more lanes
// than ranks) rank `lane` alone, which lands on a further worker lane of a device.
JobSpec lane_job(const JobSpec& job, int lane, int lanes, int ranks) {
  JobSpec out = job;
  if (lanes <= ranks) {
    out.parallel.first_rank = lane * ranks / lanes;
    out.parallel.lane_ranks = (lane + 1) * ranks / lanes - out.parallel.first_rank;
  } else {
    out.parallel.first_rank = lane;
    out.parallel.lane_ranks = 1;
  }
  return out;
}

// A one-line error names the file: a model's error (a rank's failure) may not.
std::string naming_input(const InputOutcome& in, std::string error) {
  if (error.find(in.input) == std::string::npos &&
      (in.output.empty() || error.find(in.output) == std::string::npos)) {
    error = in.input + ": " + error;
  }
  return error;
}

// Marks an input failed with `error` (named after the input if it does not say which).
void fail_input(InputOutcome& in, int code, std::string error) {
  in.state = InputState::kFailed;
  in.exit_code = code;
  in.error = naming_input(in, std::move(error));
}

// Waits for an input's output to finish (the encoder's flush, fsync, verify, rename) and records
// its result in `in`, or the finish's failure; `in.seconds` gains the finish's own time.
void settle_output(const JobSpec& job, InputOutcome& in, PendingOutput& output) {
  const auto wait_start = Clock::now();
  try {
    const TaskResult r = output.wait();
    in.frames = r.frames;
    in.metrics = r.metrics;
    in.decoder = r.decoder;
    in.dropped = r.dropped;
    in.bound = r.bound;
    in.state = InputState::kDone;
    in.seconds += r.finish_seconds;  // its own time, not that of the input run meanwhile
  } catch (const Error& e) {
    fail_input(
        in, e.exit_code(),
        e.exit_code() == kExitTempFail ? interrupted_text(job, in.input, in.output) : e.what());
    in.seconds += seconds_since(wait_start);
  } catch (const std::exception& e) {
    fail_input(in, kExitSoftware, in.input + ": internal error: " + e.what());
    in.seconds += seconds_since(wait_start);
  }
}

// Runners for further input lanes, given how many inputs are left to start.
using LaneGrowth = std::function<std::vector<std::unique_ptr<TaskRunner>>(size_t left)>;

// The inputs of a batch on `lanes` input lanes at once (one runner each, on devices or worker
// lanes of their own): input k < lanes starts on lane k, then a lane takes the next input not yet
// started, so the inputs start in their order; an input whose output an earlier one of the batch
// also writes waits for it. Outcomes are recorded in the inputs' order once all are done; inputs
// not started (a cancel, --stop-on-error after a failure) are left out, as in the sequential loop.
// With `grow`, once an input of the batch is done or has written kGrowAfterSlices slices and
// inputs are left, grow(left) may return
// runners for further lanes (made on this thread: ModelShelf is per thread), which take the next
// inputs not started. Until then the inputs take their host threads for `planned` lanes
// (planned_lanes), after it for the lanes there are.
void run_lanes(const JobSpec& job, const RunOptions& options, Progress& progress,
               const std::vector<std::string>& inputs,
               std::vector<std::unique_ptr<TaskRunner>>& lanes, JobOutcome& outcome,
               const std::shared_ptr<spdlog::logger>& log, const LaneGrowth& grow, int planned,
               Clock::time_point job_start) {
  const size_t n = inputs.size();
  std::vector<std::string> outputs(n);
  for (size_t i = 0; i < n; ++i) {
    try {
      outputs[i] = expand_output(job.output, inputs[i], job.name, job.dir);
    } catch (const Error&) {
      // reported when the input runs
    }
  }
  std::vector<std::optional<InputOutcome>> results(n);
  std::vector<bool> done(n, false);
  std::mutex mutex;
  std::condition_variable finished;
  size_t next = lanes.size();  // inputs [0, lanes) are the lanes' first ones
  bool failed = false;
  bool may_grow = false;          // an input is done or has written kGrowAfterSlices (time to grow)
  size_t running = lanes.size();  // lane threads not yet returned
  bool grown = !grow;             // the batch has widened (or will not)
  // The lanes an input starting now takes its host threads for.
  auto budget_lanes = [&] {
    return grown ? int(lanes.size()) : std::max(int(lanes.size()), planned);
  };
  auto stopped = [&] {
    return (options.cancel && options.cancel->load()) || (!options.keep_going && failed);
  };
  // The most lanes that ran at once: the report's thread budget.
  int most_lanes = int(lanes.size());
  // An input through the model, its output still finishing (the encoder's flush, fsync, verify,
  // rename) on a thread of its own while the lane's next input starts: x264 holds a 24-frame
  // input's last frames until its flush (writer_flush_seconds was 0.29 of the lanes' time on one
  // H200), and a lane that waited for it left its share of the cores idle meanwhile.
  struct Started {
    size_t index = 0;
    InputOutcome in;
    Clock::time_point start;
    std::optional<io::OutputLock> lock;  // held until the output is in place or given up
    std::optional<PendingOutput> output;
  };
  auto run_one = [&](size_t i, TaskRunner& runner, Progress& lane_progress, int lanes_now) {
    Started s;
    s.index = i;
    InputOutcome& in = s.in;
    in.input = inputs[i];
    s.start = Clock::now();
    in.started = std::chrono::duration<double>(s.start - job_start).count();
    try {
      in.output = expand_output(job.output, in.input, job.name, job.dir);
      // An image sequence's output is its folder (written whole, renamed into place).
      const std::string target = io::output_target(in.output);
      const bool to_stdout = in.output == kStdoutName;
      if (!to_stdout) {
        make_output_folder(target);
        s.lock.emplace(target, options.cancel);
      }
      if (!to_stdout && !prepare_output(job, in.input, target, target != in.output)) {
        in.state = InputState::kSkipped;
        log->info("{}: exists, skipped", in.output);
      } else {
        // The lanes share the cores: this input's host threads are its share, and its TBB work
        // (graph, pipeline) runs in an arena of that many threads.
        RunOptions lane_options = options;
        lane_options.lanes = lanes_now;
        if (grow) {
          // The sink's thread, one call at a time: the batch may widen once this input's first
          // slices are written (input_lanes.h), not only when it is done.
          lane_options.on_slice = [&, given = options.on_slice](int64_t slice, int64_t written) {
            if (given) given(slice, written);
            if (slice + 1 < kGrowAfterSlices) return;
            std::lock_guard<std::mutex> lock(mutex);
            if (!may_grow) {
              may_grow = true;
              finished.notify_all();
            }
          };
        }
        const parallel::ThreadBudget budget =
            parallel::thread_budget(parallel::host_cores(), lanes_now);
        tbb::task_arena arena(budget.tbb_threads);
        if (to_stdout) {
          arena.execute([&] {
            in.frames = runner.process(in.input, in.output, lane_options, lane_progress);
          });
          in.metrics = runner.metrics();
          in.decoder = runner.decoder();
          in.dropped = runner.dropped();
          in.bound = runner.bound();
          in.state = InputState::kDone;
        } else {
          arena.execute([&] {
            s.output.emplace(runner.start(in.input, in.output, lane_options, lane_progress));
          });
        }
      }
    } catch (const Error& e) {
      fail_input(
          in, e.exit_code(),
          e.exit_code() == kExitTempFail ? interrupted_text(job, in.input, in.output) : e.what());
    } catch (const std::exception& e) {
      fail_input(in, kExitSoftware, in.input + ": internal error: " + e.what());
    }
    in.seconds = seconds_since(s.start);
    return s;
  };
  // Waits for a started input's output and records its outcome.
  auto settle = [&](Started& s) {
    InputOutcome& in = s.in;
    if (s.output) {
      settle_output(job, in, *s.output);
      s.output.reset();
    }
    s.lock.reset();
    if (in.state == InputState::kFailed) log->error("{}", in.error);
    std::lock_guard<std::mutex> lock(mutex);
    if (in.state == InputState::kFailed) failed = true;
    results[s.index] = std::move(in);
    done[s.index] = true;
    may_grow = true;
    finished.notify_all();
  };
  // `runner` is passed, not looked up in `lanes`: the vector grows while lanes run.
  auto lane_loop = [&](size_t lane, TaskRunner* runner, bool first) {
    name_this_thread(kLaneThreads);
    Progress lane_progress(progress);
    // The lane's last input, its output still finishing (a pointer: GCC 12 warns, wrongly, that an
    // optional of it may be used uninitialized).
    std::unique_ptr<Started> finishing;
    auto settle_finishing = [&] {
      if (!finishing) return;
      settle(*finishing);
      finishing.reset();
    };
    auto leave = [&] {
      --running;
      finished.notify_all();
    };
    for (;;) {
      size_t i = 0;
      int lanes_now = 1;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (stopped() || (!first && next >= n)) {
          lock.unlock();
          settle_finishing();
          lock.lock();
          return leave();
        }
        lanes_now = budget_lanes();
        if (first) {
          i = lane;  // input k < lanes starts on lane k, whichever thread is up first
          first = false;
        } else {
          i = next++;
        }
        // Two inputs with one output (validation refuses those it can see): the earlier one must
        // be on disk before this one checks it. A lane that waits settles its own last output
        // first: nobody else settles it, and two lanes waiting on each other's would never end.
        auto earlier_pending = [&] {
          for (size_t j = 0; j < i; ++j) {
            if (!done[j] && !outputs[i].empty() && outputs[j] == outputs[i]) return true;
          }
          return false;
        };
        if (finishing && earlier_pending()) {
          lock.unlock();
          settle_finishing();
          lock.lock();
        }
        finished.wait(lock, [&] { return !earlier_pending(); });
      }
      Started s = run_one(i, *runner, lane_progress, lanes_now);
      settle_finishing();  // the previous output finished alongside this input's model work
      if (s.output) {
        finishing = std::make_unique<Started>(std::move(s));
      } else {
        settle(s);
      }
    }
  };
  progress.begin(
      job.name + ": " + std::to_string(n) + " inputs, " + std::to_string(lanes.size()) + " at once",
      0);
  log->info("thread budget per input: {}",
            parallel::thread_budget(parallel::host_cores(), budget_lanes()).text());
  std::vector<std::thread> threads;
  for (size_t lane = 0; lane < lanes.size(); ++lane) {
    threads.emplace_back(lane_loop, lane, lanes[lane].get(), true);
  }
  if (grow) {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return may_grow || running == 0; });
    if (may_grow && running > 0 && next < n && !stopped()) {
      const size_t left = n - next;
      lock.unlock();
      std::vector<std::unique_ptr<TaskRunner>> more;
      try {
        more = grow(left);
      } catch (const Error& e) {
        log->warn("no further input lanes: {}", e.what());
      }
      lock.lock();
      for (std::unique_ptr<TaskRunner>& r : more) {
        lanes.push_back(std::move(r));
        ++running;
        threads.emplace_back(lane_loop, lanes.size() - 1, lanes.back().get(), false);
      }
      most_lanes = std::max(most_lanes, int(lanes.size()));
      if (!more.empty()) {
        log->info("thread budget per input: {}",
                  parallel::thread_budget(parallel::host_cores(), most_lanes).text());
      }
    }
    grown = true;
  }
  for (std::thread& t : threads) t.join();
  outcome.input_lanes = int(lanes.size());
  outcome.threads = parallel::thread_budget(parallel::host_cores(), most_lanes);
  progress.end();
  for (std::optional<InputOutcome>& in : results) {
    if (!in) continue;
    if (in->state == InputState::kFailed && outcome.exit_code == 0) {
      outcome.exit_code = in->exit_code;
    }
    outcome.frames += in->frames;
    outcome.inputs.push_back(std::move(*in));
  }
}

}  // namespace

const char* to_string(InputState s) {
  switch (s) {
    case InputState::kDone:
      return "done";
    case InputState::kSkipped:
      return "skipped";
    case InputState::kFailed:
    default:
      return "failed";
  }
}

ModelSummary model_summary(const JobSpec& job) {
  ModelSummary m;
  m.kind = job.model.kind;
  m.weights = job.model.weights;
  m.precision = to_string(job.model.precision);
  if (!m.weights.empty()) {
    const ReleasedModel* released =
        model_catalog().find_file(m.weights.substr(m.weights.find_last_of('/') + 1));
    if (released) {
      m.name = released->name;
      m.scale = released->scale;
    }
  }
  return m;
}

JobOutcome run_job(const JobSpec& job, const RunOptions& options, Progress& progress) {
  auto log = log::get("job:" + job.name);
  JobOutcome outcome;
  outcome.threads = parallel::thread_budget(parallel::host_cores(), 1);
  outcome.job = job.name;
  outcome.file = job.file;
  outcome.task = to_string(job.task);
  outcome.model = model_summary(job);
  const auto job_start = Clock::now();

  std::vector<std::string> inputs;
  std::unique_ptr<TaskRunner> runner;
  // Input lanes' runners share the models (one per device) and the fault injection.
  ModelShelf shelf;
  std::vector<std::unique_ptr<TaskRunner>> lanes;
  LaneGrowth grow;
  int planned = 0;  // the lanes a growing batch plans to reach (its first inputs' threads)
  try {
    inputs = expand_inputs(job);
    runner = make_task_runner(job);
    // The scale the model declares (the built-in ones: the job's; an upscaler: with its resize).
    if (const ModelSet* models = runner->model_set()) {
      const ModelTraits& traits = models->traits();
      if (traits.scale_den == 1 && traits.scale_num > 0) outcome.model.scale = traits.scale_num;
    }
    const int n = input_lanes(job, *runner, inputs.size());
    const bool grows = lanes_may_grow(job, *runner, inputs.size());
    if (n > 1 || grows) {
      const int ranks = runner->model_set()->job_ranks();
      const std::vector<Device> devices = runner->model_set()->devices();  // all the job's
      runner.reset();
      for (int lane = 0; lane < n; ++lane) {
        lanes.push_back(make_task_runner(lane_job(job, lane, n, ranks)));
      }
      if (grows) {
        planned =
            planned_lanes(int64_t(inputs.size()), parallel::host_cores(), int(devices.size()), n);
        grow = [&job, &lanes, &log, ranks, devices](size_t left) {
          std::vector<std::unique_ptr<TaskRunner>> more;
          const int d = int(devices.size());
          const int now = int(lanes.size());
          const int cores = int(std::thread::hardware_concurrency());
          int per_device = kMaxLanesPerDevice;
          double peak = 0, usable = 0;
          for (const Device& device : devices) {
            const parallel::DeviceMemory m = parallel::device_memory(device);
            const int64_t peak_margin = int64_t(kFirstSlicePeakMargin * double(m.peak));
            per_device = std::min(
                per_device, lanes_per_device(m.usable, peak_margin, (now + d - 1) / d, cores, d));
            peak = std::max(peak, double(m.peak));
            usable = std::max(usable, double(m.usable));
          }
          // The lanes the devices have room for, as few as keep the batch's rounds.
          const size_t total =
              size_t(balanced_lanes(int64_t(now) + int64_t(left), per_device * d, now));
          for (size_t lane = size_t(now); lane < total; ++lane) {
            more.push_back(make_task_runner(lane_job(job, int(lane), int(lane) + 1, ranks)));
          }
          log->info(
              "{} inputs at once (room for {} per device: peak {:.2f} GiB after the first slices, "
              "{:.1f} GiB usable, {} cores)",
              total > size_t(now) ? total : size_t(now), per_device, peak / double(1 << 30),
              usable / double(1 << 30), cores);
          return more;
        };
      }
    }
  } catch (const Error& e) {
    InputOutcome failed;
    failed.state = InputState::kFailed;
    failed.exit_code = e.exit_code();
    failed.error = e.what();
    outcome.inputs.push_back(failed);
    outcome.exit_code = e.exit_code();
    log->error("{}", e.what());
    return outcome;
  }

  // An input whose output is still finishing (encoder flush, fsync, verify, rename) while the
  // next input runs through the model; settled before that input's outcome is recorded.
  struct Finishing {
    InputOutcome in;
    double seconds;       // until its finish began
    io::OutputLock lock;  // held until the output is in place or given up (outlives `output`)
    PendingOutput output;
  };
  std::optional<Finishing> finishing;
  auto record = [&](InputOutcome in) {
    if (in.state == InputState::kFailed) {
      log->error("{}", in.error);
      if (outcome.exit_code == 0) outcome.exit_code = in.exit_code;
    }
    outcome.frames += in.frames;
    outcome.inputs.push_back(std::move(in));
  };
  auto settle = [&] {
    if (!finishing) return;
    InputOutcome in = std::move(finishing->in);
    in.seconds = finishing->seconds;
    settle_output(job, in, finishing->output);
    finishing.reset();
    record(std::move(in));
  };
  auto stopped = [&] {
    return (options.cancel && options.cancel->load()) ||
           (!options.keep_going && outcome.exit_code != 0);
  };

  if (!lanes.empty()) {
    run_lanes(job, options, progress, inputs, lanes, outcome, log, grow, planned, job_start);
    outcome.seconds = seconds_since(job_start);
    outcome.peak_rss_mib = peak_rss_mib();
    return outcome;
  }

  for (size_t i = 0; i < inputs.size() && !stopped(); ++i) {
    InputOutcome in;
    in.input = inputs[i];
    const auto start = Clock::now();
    in.started = std::chrono::duration<double>(start - job_start).count();
    std::optional<PendingOutput> output;
    std::optional<io::OutputLock> lock;
    try {
      in.output = expand_output(job.output, in.input, job.name, job.dir);
      // Two inputs with one output: the first must be on disk before the second checks it.
      if (finishing && finishing->in.output == in.output) {
        settle();
        if (stopped()) break;
      }
      // An image sequence's output is its folder (written whole, renamed into place). Standard
      // output is no file: nothing to lock, check or skip.
      const std::string target = io::output_target(in.output);
      const bool to_stdout = in.output == kStdoutName;
      if (!to_stdout) {
        make_output_folder(target);
        lock.emplace(target, options.cancel);
      }
      if (!to_stdout && !prepare_output(job, in.input, target, target != in.output)) {
        in.state = InputState::kSkipped;
        log->info("{}: exists, skipped", in.output);
      } else if (i + 1 < inputs.size() && !to_stdout) {
        output.emplace(runner->start(in.input, in.output, options, progress));
      } else {
        in.frames = runner->process(in.input, in.output, options, progress);
        in.metrics = runner->metrics();
        in.decoder = runner->decoder();
        in.dropped = runner->dropped();
        in.bound = runner->bound();
        in.state = InputState::kDone;
      }
    } catch (const Error& e) {
      fail_input(
          in, e.exit_code(),
          e.exit_code() == kExitTempFail ? interrupted_text(job, in.input, in.output) : e.what());
    } catch (const std::exception& e) {
      fail_input(in, kExitSoftware, in.input + ": internal error: " + e.what());
    }
    settle();  // the previous input's finish ran alongside this one's model work
    if (output) {
      const double seconds = seconds_since(start);
      finishing.emplace(Finishing{std::move(in), seconds, std::move(*lock), std::move(*output)});
    } else {
      in.seconds = seconds_since(start);
      record(std::move(in));
    }
  }
  settle();
  outcome.seconds = seconds_since(job_start);
  outcome.peak_rss_mib = peak_rss_mib();
  return outcome;
}

void write_report(const std::string& path, const std::vector<JobOutcome>& outcomes) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobOutcome& o : outcomes) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const InputOutcome& in : o.inputs) {
      nlohmann::json j = {{"input", in.input},
                          {"output", in.output},
                          {"state", to_string(in.state)},
                          {"frames", in.frames},
                          {"started_seconds", in.started},
                          {"seconds", in.seconds},
                          {"fps", in.seconds > 0 ? in.frames / in.seconds : 0.0}};
      // The frame sizes, as integers under names of their own.
      const std::pair<const char*, const char*> sizes[] = {{"input_width", "width"},
                                                           {"input_height", "height"},
                                                           {"output_width", "output_width"},
                                                           {"output_height", "output_height"}};
      for (const auto& metric : in.metrics) {
        const std::string& name = metric.first;  // (a structured binding: not capturable in C++17)
        const auto& value = metric.second;
        const auto size = std::find_if(std::begin(sizes), std::end(sizes),
                                       [&](const auto& s) { return name == s.first; });
        if (size != std::end(sizes)) {
          j[size->second] = int64_t(value);
        } else {
          j[name] = value;
        }
      }
      if (!in.decoder.empty()) j["decoder"] = in.decoder;
      if (!in.bound.empty()) j["bound"] = in.bound;
      if (in.state == InputState::kDone) j["dropped"] = in.dropped;
      if (in.state == InputState::kFailed) {
        j["error"] = in.error;
        j["exit_code"] = in.exit_code;
      }
      inputs.push_back(j);
    }
    nlohmann::json model = {{"kind", o.model.kind}, {"precision", o.model.precision}};
    if (!o.model.weights.empty()) model["weights"] = o.model.weights;
    if (!o.model.name.empty()) model["name"] = o.model.name;
    if (o.model.scale > 0) model["scale"] = o.model.scale;
    jobs.push_back({{"job", o.job},
                    {"file", o.file},
                    {"task", o.task},
                    {"model", model},
                    {"frames", o.frames},
                    {"seconds", o.seconds},
                    {"fps", o.seconds > 0 ? o.frames / o.seconds : 0.0},
                    {"peak_rss_mib", o.peak_rss_mib},
                    {"input_lanes", o.input_lanes},
                    {"thread_budget",
                     {{"cores", o.threads.cores},
                      {"lanes", o.threads.lanes},
                      {"lane_cores", o.threads.lane_cores},
                      {"decode_threads", o.threads.decode_threads},
                      {"device_decode_threads", o.threads.device_decode_threads},
                      {"convert_threads", o.threads.convert_threads},
                      {"encoder_threads", o.threads.encoder_threads},
                      {"tbb_threads", o.threads.tbb_threads},
                      {"torch_threads", o.threads.torch_threads}}},
                    {"exit_code", o.exit_code},
                    {"inputs", inputs}});
  }
  // Paths are bytes: json_dump keeps those that are not UTF-8 (\udcXX).
  fs::write_file_atomic(path, json_dump(jobs, 2) + "\n");
}

int run_job_files(const std::vector<std::string>& files, const RunOptions& options,
                  std::vector<JobOutcome>* outcomes_out) {
  // Validate everything before any work.
  std::vector<JobSpec> jobs;
  for (const std::string& file : files) {
    std::vector<JobSpec> loaded = load_job_file(file);
    jobs.insert(jobs.end(), loaded.begin(), loaded.end());
  }
  return run_jobs(std::move(jobs), options, outcomes_out);
}

int run_jobs(std::vector<JobSpec> jobs, const RunOptions& options,
             std::vector<JobOutcome>* outcomes_out) {
  for (JobSpec& job : jobs) {
    if (!options.devices.empty()) override_devices(job, options.devices);
    if (options.on_exists) job.on_exists = *options.on_exists;
  }
  preflight(jobs);
  if (!options.report_path.empty()) check_report_path(options.report_path, jobs);
  // Farm managers (Deadline) parse "Progress: N%" from stdout, unless a job's video goes there.
  const bool stdout_taken = std::any_of(jobs.begin(), jobs.end(),
                                        [](const JobSpec& j) { return j.output == kStdoutName; });
  Progress progress(options.progress,
                    options.progress == ProgressStyle::kFarm && !stdout_taken ? stdout : stderr);
  std::vector<JobOutcome> outcomes;
  int exit_code = 0;
  for (const JobSpec& job : jobs) {
    if (options.cancel && options.cancel->load()) {
      exit_code = kExitTempFail;
      break;
    }
    outcomes.push_back(run_job(job, options, progress));
    if (exit_code == 0) exit_code = outcomes.back().exit_code;
    if (outcomes.back().exit_code != 0 && !options.keep_going) break;
  }
  if (options.cancel && options.cancel->load()) exit_code = kExitTempFail;
  if (!options.report_path.empty()) write_report(options.report_path, outcomes);
  if (outcomes_out) *outcomes_out = std::move(outcomes);
  return exit_code;
}

}  // namespace wm::sched
