// wmbatch: run video model jobs. A thin main: parses the command line, installs the signal
// handlers and hands over to the scheduler.
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "io/av_log.h"
#include "io/version.h"
#include "scheduler/runner.h"
#include "src/base/error.h"
#include "src/base/log.h"

namespace {

std::atomic<bool> g_cancel{false};

extern "C" void on_signal(int sig) {
  // First signal: stop at the next slice boundary. Second: default action.
  if (g_cancel.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

const char* kExitCodes = R"(Exit codes:
  0   all jobs done (or skipped)
  1   a job failed for another reason
  64  bad command line
  65  bad job file, model config or weights; corrupt or unusable input (retrying won't help)
  66  input file missing or unreadable
  70  internal error
  73  output cannot be created (folder not writable, exists with on_exists: fail)
  74  write failed (disk full, I/O error)
  75  interrupted (SIGINT/SIGTERM); rerunning resumes
With several inputs, the first failure's code is returned after all inputs were tried.)";

wm::sched::ProgressStyle parse_style(const std::string& s) {
  using wm::sched::ProgressStyle;
  if (s == "bar") return ProgressStyle::kBar;
  if (s == "plain") return ProgressStyle::kPlain;
  if (s == "farm") return ProgressStyle::kFarm;
  if (s == "none") return ProgressStyle::kNone;
  return ProgressStyle::kAuto;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "wmbatch: run video neural models (upscalers, Wan2.1 VAE) over videos of any "
      "length.\nUsage: wmbatch [options] JOB.yaml...  (job format: docs/job-format.md)"};
  app.footer(kExitCodes);
  std::vector<std::string> job_files;
  std::string report, progress = "auto", log_level = "info";
  bool keep_going = true, version = false;
  app.add_option("jobs", job_files, "job files (YAML), run in order")->type_name("JOB.yaml");
  app.add_option("--report", report,
                 "write a JSON summary per job (frames, seconds, fps, "
                 "peak memory) to FILE")
      ->type_name("FILE");
  app.add_option("--progress", progress,
                 "progress display: auto (bar on a TTY, else lines), "
                 "bar, plain, farm ('Progress: N%' lines), none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "farm", "none"}));
  app.add_flag("--keep-going,!--stop-on-error", keep_going,
               "after a failed input, go on with the others (default on)");
  app.add_option("--log-level", log_level, "error, warn, info, debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug", "trace"}));
  app.add_flag("--version", version, "print versions and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : wm::kExitUsage;
  }
  if (version) {
    std::printf("wmbatch 0.1.0 (%s)\n", wm::io::libav_versions().c_str());
    return 0;
  }
  if (job_files.empty()) {
    std::fprintf(stderr, "wmbatch: no job file given (try --help)\n");
    return wm::kExitUsage;
  }
  wm::log::set_level(log_level);
  wm::io::install_av_log();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  wm::sched::RunOptions options;
  options.progress = parse_style(progress);
  options.keep_going = keep_going;
  options.report_path = report;
  options.cancel = &g_cancel;
  try {
    std::vector<wm::sched::JobOutcome> outcomes;
    const int rc = wm::sched::run_job_files(job_files, options, &outcomes);
    int done = 0, skipped = 0, failed = 0;
    for (const auto& job : outcomes) {
      for (const auto& in : job.inputs) {
        done += in.state == wm::sched::InputState::kDone;
        skipped += in.state == wm::sched::InputState::kSkipped;
        failed += in.state == wm::sched::InputState::kFailed;
      }
    }
    std::fprintf(stderr, "wmbatch: %d done, %d skipped, %d failed\n", done, skipped, failed);
    for (const auto& job : outcomes) {
      for (const auto& in : job.inputs) {
        if (in.state == wm::sched::InputState::kFailed) {
          std::fprintf(stderr, "  failed: %s\n", in.error.c_str());
        }
      }
    }
    return rc;
  } catch (const wm::Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmbatch: internal error: %s\n", e.what());
    return wm::kExitSoftware;
  }
}
