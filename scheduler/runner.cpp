#include "scheduler/runner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/devices.h"
#include "scheduler/pipeline.h"
#include "scheduler/tasks.h"
#include "scheduler/video_stages.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::sched {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Checks what must hold before any work on one input; returns false to skip it.
bool prepare_output(const JobSpec& job, const std::string& input, const std::string& output) {
  if (fs::same_file(input, output)) {
    throw Error(output + ": output would overwrite its input", kExitDataErr);
  }
  if (file_exists(output)) {
    if (job.on_exists == OnExists::kSkip) return false;
    if (job.on_exists == OnExists::kFail) {
      throw OutputError(output + ": output exists (set on_exists: overwrite or skip)",
                        kExitCantCreat);
    }
  }
  const std::string dir = fs::parent_dir(output);
  fs::make_dirs(dir);
  if (::access(dir.c_str(), W_OK) != 0) {
    throw OutputError(dir + ": output folder is not writable", kExitCantCreat);
  }
  return true;
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

JobOutcome run_job(const JobSpec& job, const RunOptions& options, Progress& progress) {
  auto log = log::get("job:" + job.name);
  JobOutcome outcome;
  outcome.job = job.name;
  outcome.file = job.file;
  outcome.task = to_string(job.task);
  const auto job_start = Clock::now();

  std::vector<std::string> inputs;
  std::unique_ptr<TaskRunner> runner;
  try {
    inputs = expand_inputs(job);
    runner = make_task_runner(job);
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

  for (const std::string& input : inputs) {
    if (options.cancel && options.cancel->load()) break;
    InputOutcome in;
    in.input = input;
    const auto start = Clock::now();
    try {
      in.output = expand_output(job.output, input, job.name, job.dir);
      if (!prepare_output(job, input, in.output)) {
        in.state = InputState::kSkipped;
        log->info("{}: exists, skipped", in.output);
      } else {
        in.frames = runner->process(input, in.output, options, progress);
        in.metrics = runner->metrics();
        in.decoder = runner->decoder();
        in.state = InputState::kDone;
      }
    } catch (const Error& e) {
      in.state = InputState::kFailed;
      in.exit_code = e.exit_code();
      in.error = e.what();
    } catch (const std::exception& e) {
      in.state = InputState::kFailed;
      in.exit_code = kExitSoftware;
      in.error = input + ": internal error: " + e.what();
    }
    in.seconds = seconds_since(start);
    if (in.state == InputState::kFailed) {
      log->error("{}", in.error);
      if (outcome.exit_code == 0) outcome.exit_code = in.exit_code;
    }
    outcome.frames += in.frames;
    outcome.inputs.push_back(in);
    if (in.state == InputState::kFailed && !options.keep_going) break;
  }
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
                          {"seconds", in.seconds},
                          {"fps", in.seconds > 0 ? in.frames / in.seconds : 0.0}};
      for (const auto& [name, value] : in.metrics) j[name] = value;
      if (!in.decoder.empty()) j["decoder"] = in.decoder;
      if (in.state == InputState::kFailed) {
        j["error"] = in.error;
        j["exit_code"] = in.exit_code;
      }
      inputs.push_back(j);
    }
    jobs.push_back({{"job", o.job},
                    {"file", o.file},
                    {"task", o.task},
                    {"frames", o.frames},
                    {"seconds", o.seconds},
                    {"fps", o.seconds > 0 ? o.frames / o.seconds : 0.0},
                    {"peak_rss_mib", o.peak_rss_mib},
                    {"exit_code", o.exit_code},
                    {"inputs", inputs}});
  }
  fs::write_file_atomic(path, jobs.dump(2) + "\n");
}

int run_job_files(const std::vector<std::string>& files, const RunOptions& options,
                  std::vector<JobOutcome>* outcomes_out) {
  // Validate everything before any work.
  std::vector<JobSpec> jobs;
  for (const std::string& file : files) {
    std::vector<JobSpec> loaded = load_job_file(file);
    jobs.insert(jobs.end(), loaded.begin(), loaded.end());
  }
  // Farm managers (Deadline) parse "Progress: N%" from stdout.
  Progress progress(options.progress, options.progress == ProgressStyle::kFarm ? stdout : stderr);
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
