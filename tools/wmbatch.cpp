// wmbatch: run video model jobs. A thin main: parses the command line, installs the signal
// handlers and hands over to the scheduler.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "io/av_log.h"
#include "scheduler/farm.h"
#include "scheduler/runner.h"
#include "scheduler/slurm.h"
#include "src/base/error.h"
#include "src/base/heap.h"
#include "src/base/log.h"
#include "src/models/catalog.h"
#include "tools/front_door.h"
#include "watch/cli.h"

namespace {

std::atomic<bool> g_cancel{false};
std::atomic<int> g_hard_signals{0};

extern "C" void on_signal(int sig) {
  // SIGINT/SIGTERM/SIGHUP (the terminal closed)/SIGUSR1: stop at the next slice boundary (exit
  // 75), removing the partial output. A second SIGINT/SIGTERM/SIGHUP takes the default action;
  // SIGUSR1 never does, so a farm wrapper may forward SIGUSR1 to a process that its manager
  // signalled directly too (scheduler/slurm.h).
  g_cancel.store(true);
  if (sig != SIGUSR1 && g_hard_signals.fetch_add(1) > 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

void install_signals() {
  // A reader of our standard output that goes away (`wmbatch ... -o - | head`) is a write error
  // (EPIPE: one line, exit 74), not a silent death.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);
  std::signal(SIGUSR1, on_signal);
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
  75  interrupted (SIGINT/SIGTERM/SIGHUP/SIGUSR1); rerunning resumes
With several inputs, the first failure's code is returned after all inputs were tried.

One-line commands (the same jobs; `wmbatch upscale --help`):
  wmbatch upscale IN... -o OUT [--model NAME|PATH] [--scale N] [--tile N] [-y|-n]
  wmbatch decode-latents IN... -o OUT --model NAME|PATH
  wmbatch models                                    the models folder and the released names

Farm commands (one chunk of frames per farm task; docs/farm.md; `wmbatch CMD --help`):
  wmbatch plan JOB.yaml [--chunk-frames N]          print the chunks (JSON)
  wmbatch run JOB.yaml [--chunk N | --frames A-B]   one chunk (default: $SLURM_ARRAY_TASK_ID or
                                                    $JOB_COMPLETION_INDEX), or all + assemble
  wmbatch assemble JOB.yaml                         concatenate the segments, mux audio
  wmbatch submit --slurm JOB.yaml...                a Slurm job array + an afterok assemble job

Watch folder (docs/watch.md):
  wmbatch watch WATCH.yaml                          the daemon: every file that settles, once
  wmbatch status WATCH.yaml [--json]                its queue: counts, running, last failures)";

const char* kFarmExitCodes = R"(Exit codes (farm):
  0   done, or already done
  64  bad command line
  65  bad job file or input, or a chunk/range that does not exist: never worth retrying
  66  input missing; 73 output exists (on_exists: fail) or cannot be created
  75  interrupted (SIGTERM/SIGINT/SIGHUP/SIGUSR1): stopped at a slice boundary; rerun to resume
  other non-zero (1: chunks missing for assemble, 70, 74, ...): worth a retry)";

void add_common(CLI::App& app, std::string& log_level) {
  app.add_option("--log-level", log_level, "error, warn, info, debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug", "trace"}));
}

// Parses a farm subcommand's options; returns -1 to go on, or the exit code.
int parse_sub(CLI::App& app, int argc, char** argv) {
  app.footer(kFarmExitCodes);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : wm::kExitUsage;
  }
  return -1;
}

void start(const std::string& log_level) {
  wm::log::set_level(log_level);
  wm::io::install_av_log();
  install_signals();
}

int cmd_plan(int argc, char** argv) {
  CLI::App app{
      "wmbatch plan: print the chunks of a job file as JSON (index, input, output, "
      "first/last frame, context frames before/after).",
      "wmbatch plan"};
  std::string job, log_level = "warn";
  wm::sched::FarmOptions options;
  app.add_option("job", job, "job file (YAML)")->required()->type_name("JOB.yaml");
  app.add_option("--chunk-frames", options.chunk_frames,
                 "frames per chunk (rounded to the model's frame groups; default " +
                     std::to_string(wm::sched::kDefaultChunkFrames) + ")")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  add_common(app, log_level);
  if (const int rc = parse_sub(app, argc, argv); rc >= 0) return rc;
  start(log_level);
  try {
    const wm::sched::FarmPlan plan = wm::sched::plan_farm(job, options);
    std::printf("%s\n", wm::sched::plan_json(plan).c_str());
    return 0;
  } catch (const wm::Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
}

int cmd_run(int argc, char** argv) {
  CLI::App app{
      "wmbatch run: process one chunk of a job file into a segment beside its output "
      "(decoding the context frames it needs, writing only its own), or, with no chunk "
      "given, every chunk in order and then assemble.",
      "wmbatch run"};
  std::string job, frames, progress = "auto", log_level = "info";
  int64_t chunk = -1;
  wm::sched::FarmOptions options;
  app.add_option("job", job, "job file (YAML)")->required()->type_name("JOB.yaml");
  auto* chunk_opt =
      app.add_option("--chunk", chunk,
                     "chunk index from `wmbatch plan` (default: $SLURM_ARRAY_TASK_ID, "
                     "else $JOB_COMPLETION_INDEX)")
          ->check(CLI::NonNegativeNumber);
  app.add_option("--frames", frames,
                 "an explicit frame range FIRST-LAST (inclusive, 0-based) "
                 "of a job file with one input")
      ->type_name("A-B")
      ->excludes(chunk_opt);
  app.add_option("--chunk-frames", options.chunk_frames,
                 "frames per chunk; must be what `plan` was given (default: what earlier runs "
                 "of this plan recorded in the journal, else " +
                     std::to_string(wm::sched::kDefaultChunkFrames) + ")")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--progress", progress,
                 "auto, bar, plain, farm ('Progress: N%' lines, flushed), none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "farm", "none"}));
  app.add_flag("--keep-journal", options.keep_journal,
               "keep <output>.wmfarm/ once the output is assembled (reruns of its chunks are "
               "then no-ops)");
  add_common(app, log_level);
  if (const int rc = parse_sub(app, argc, argv); rc >= 0) return rc;
  start(log_level);
  options.progress = wm::tools::parse_style(progress);
  options.cancel = &g_cancel;
  wm::sched::ChunkSelection selection;
  try {
    if (!frames.empty()) {
      selection.frames = wm::sched::parse_frame_range(frames);
    } else if (chunk >= 0) {
      selection.chunk = chunk;
    } else {
      selection.chunk = wm::sched::chunk_from_environment();
    }
  } catch (const wm::Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
  return wm::sched::run_farm(job, selection, options);
}

int cmd_assemble(int argc, char** argv) {
  CLI::App app{
      "wmbatch assemble: check every segment of every output of a job file (frame "
      "count, pts continuity), concatenate them without re-encoding, mux audio and "
      "subtitles once from the source, verify and rename into place.",
      "wmbatch assemble"};
  std::string job, progress = "auto", log_level = "info";
  wm::sched::FarmOptions options;
  app.add_option("job", job, "job file (YAML)")->required()->type_name("JOB.yaml");
  app.add_flag("--keep-segments", options.keep_segments,
               "leave the segments (and the journal) in place");
  app.add_flag("--keep-journal", options.keep_journal,
               "keep <output>.wmfarm/ (the journal) once the output is assembled");
  app.add_option("--progress", progress, "accepted for symmetry with run (assembly is quick)")
      ->check(CLI::IsMember({"auto", "bar", "plain", "farm", "none"}));
  add_common(app, log_level);
  if (const int rc = parse_sub(app, argc, argv); rc >= 0) return rc;
  start(log_level);
  options.progress = wm::tools::parse_style(progress);
  options.cancel = &g_cancel;
  return wm::sched::assemble_farm(job, options);
}

std::string self_path(const char* argv0) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, size_t(n));
  return argv0;
}

int cmd_submit(int argc, char** argv) {
  CLI::App app{
      "wmbatch submit: submit job files to a cluster scheduler: per job file one array "
      "job of chunk tasks (--requeue, --signal) and one assemble job that runs after "
      "all of them succeeded (afterok). Prints one JSON line per job file with the job "
      "ids.",
      "wmbatch submit"};
  std::vector<std::string> jobs;
  std::string log_level = "info";
  bool slurm = false;
  wm::sched::SlurmOptions options;
  options.wmbatch = self_path(argv[0]);
  app.add_option("jobs", jobs, "job files (YAML)")->required()->type_name("JOB.yaml");
  app.add_flag("--slurm", slurm, "submit to Slurm (sbatch); the only engine for now")->required();
  app.add_option("--partition", options.partition, "Slurm partition (default: the cluster's)");
  app.add_option("--gpus-per-task", options.gpus_per_task,
                 "GPUs per chunk task (default: 1 when the job uses GPUs, else 0)")
      ->check(CLI::Range(0, 64));
  app.add_option("--cpus-per-task", options.cpus_per_task, "CPUs per task (default: Slurm's)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--max-parallel", options.max_parallel,
                 "at most K chunk tasks at once (array throttle %K; default: no limit)")
      ->check(CLI::Range(0, 1000000));
  app.add_option(
         "--chunk-frames", options.chunk_frames,
         "frames per chunk (default " + std::to_string(wm::sched::kDefaultChunkFrames) + ")")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app.add_option("--time", options.time_limit, "time limit per task (sbatch --time)");
  app.add_option("--signal-seconds", options.signal_seconds,
                 "SIGUSR1 this long before the time limit: the task stops at a slice boundary "
                 "and requeues itself (default 120)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--max-retries", options.max_retries,
                 "requeue a failed task (other than 64/65/66/73) up to N times (default 2)")
      ->check(CLI::Range(0, 100));
  app.add_option("--log-dir", options.log_dir, "folder for the task logs (default: Slurm's)");
  app.add_option("--sbatch-arg", options.sbatch_args, "extra sbatch option, e.g. --account=X")
      ->type_name("ARG");
  app.add_flag("--dry-run", options.dry_run,
               "print the scripts and sbatch commands; submit nothing");
  app.add_flag("--wait", options.wait,
               "wait for the assemble jobs; exit 0 only when all completed");
  add_common(app, log_level);
  if (const int rc = parse_sub(app, argc, argv); rc >= 0) return rc;
  start(log_level);
  if (!options.log_dir.empty()) {
    char* real = ::realpath(options.log_dir.c_str(), nullptr);
    if (!real) {
      std::fprintf(stderr, "wmbatch: --log-dir %s: %s\n", options.log_dir.c_str(),
                   std::strerror(errno));
      return wm::kExitUsage;
    }
    options.log_dir = real;
    std::free(real);
  }
  return wm::sched::submit_slurm(jobs, options, &g_cancel);
}

}  // namespace

int main(int argc, char** argv) {
  wm::tune_heap_for_frames();
  if (argc >= 2) {
    const std::string command = argv[1];
    if (command == "plan") return cmd_plan(argc - 1, argv + 1);
    if (command == "run") return cmd_run(argc - 1, argv + 1);
    if (command == "assemble") return cmd_assemble(argc - 1, argv + 1);
    if (command == "submit") return cmd_submit(argc - 1, argv + 1);
    if (command == "watch") return wm::watch::main_watch(argc - 1, argv + 1);
    if (command == "status") return wm::watch::main_status(argc - 1, argv + 1);
    if (command == "upscale" || command == "decode-latents") {
      return wm::tools::main_command_job(
          command == "upscale" ? wm::Task::kUpscale : wm::Task::kDecodeLatents, argc - 1, argv + 1,
          &g_cancel, start);
    }
    if (command == "models") return wm::tools::main_models(argc - 1, argv + 1);
  }
  CLI::App app{
      "wmbatch: run video neural models (upscalers, Wan2.1 and SeedVR2 VAEs) over videos of "
      "any length (job format: docs/job-format.md).",
      "wmbatch"};
  wm::tools::set_usage(app,
                       "Usage: wmbatch [OPTIONS] JOB.yaml...\n"
                       "       wmbatch upscale IN... -o OUT [--model NAME|PATH] [OPTIONS]\n"
                       "       wmbatch decode-latents IN... -o OUT --model NAME|PATH [OPTIONS]\n"
                       "       wmbatch plan|run|assemble|submit|watch|status|models ...");
  app.footer(kExitCodes);
  std::vector<std::string> job_files;
  bool version = false;
  wm::tools::RunFlags flags;
  app.add_option("jobs", job_files, "job files (YAML), run in order")->type_name("JOB.yaml");
  wm::tools::add_run_flags(app, flags);
  app.add_flag("--version", version, "print versions (wmbatch, FFmpeg, LibTorch, CUDA) and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : wm::kExitUsage;
  }
  if (version) {
    std::fputs(wm::tools::version_text().c_str(), stdout);
    return 0;
  }
  if (job_files.empty()) {
    std::fprintf(stderr,
                 "wmbatch: no job file given (wmbatch JOB.yaml..., or wmbatch upscale IN -o OUT; "
                 "try --help)\n");
    return wm::kExitUsage;
  }
  // A video where a job file is expected: the one-line command that does what was meant.
  for (const std::string& file : job_files) {
    const std::string hint = wm::tools::media_hint(file);
    if (!hint.empty()) {
      std::fprintf(stderr, "wmbatch: %s\n", hint.c_str());
      return wm::kExitUsage;
    }
  }
  wm::set_models_dir(flags.models_dir);
  start(flags.log_level);
  try {
    std::vector<wm::sched::JobOutcome> outcomes;
    const int rc = wm::sched::run_job_files(job_files, flags.run_options(&g_cancel), &outcomes);
    wm::tools::print_summary(outcomes);
    return rc;
  } catch (const wm::Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmbatch: internal error: %s\n", e.what());
    return wm::kExitSoftware;
  }
}
