#include "watch/cli.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "io/av_log.h"
#include "src/base/error.h"
#include "src/base/log.h"
#include "watch/daemon.h"
#include "watch/watch_spec.h"

namespace wm::watch {
namespace {

const char* kWatchFooter = R"(WATCH.yaml (docs/watch.md has every key):
  queue: watch.wmwatch.sqlite      # the SQLite queue (default: <WATCH stem>.wmwatch.sqlite)
  poll_seconds: 30                 # rescan period (network file systems: inotify sees nothing)
  settle_seconds: 5                # size and mtime unchanged this long, and not open for writing
  max_parallel: 1                  # inputs at once, spread over the job's GPUs
  chunk_frames: 240                # files run as chunks: a stopped or killed daemon resumes a
                                   # file from its last finished chunk (0: whole files)
  retry: {max_attempts: 3, backoff_seconds: 30, backoff_max_seconds: 3600}
  http: {listen: 127.0.0.1:8611}   # status page, /api/status, /metrics (off when absent)
  watch:
    - folder: /srv/incoming        # recursive: false; patterns: ["*.mp4", "*.mov", ...]
      job: jobs/upscale-x2.yaml    # a job file (its input is filled in per file) or a map
      output: /srv/out/{stem}_x2.mp4
      on_done: move                # keep (default) | move (done_folder) | delete
      done_folder: /srv/incoming-done
      failed_folder: /srv/failed   # failed inputs + <name>.error.txt (default: stay)

Signals: SIGTERM/SIGINT stop at the next slice boundary and exit 0 (running files resume from
their last finished chunk on the next run, as after SIGKILL); SIGHUP reloads WATCH.yaml (a bad
file is logged, the old one kept).
Exit codes: 0 stopped cleanly, 64 bad command line, 65 bad WATCH.yaml or job, 66 WATCH.yaml
missing, 73/74 queue file or status address unavailable.)";

int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return -1;
}

}  // namespace

int main_watch(int argc, char** argv) {
  CLI::App app{
      "wmbatch watch: a watch-folder daemon. Runs the job of each WATCH.yaml entry once on "
      "every file that settles in its folder, exactly once per version of the file, and "
      "survives being killed at any point. Runs in the foreground, logs to stderr.",
      "wmbatch watch"};
  std::string file, log_level = "info";
  bool check = false;
  app.add_option("watch_file", file, "watch configuration (YAML)")
      ->required()
      ->type_name("WATCH.yaml");
  app.add_flag("--check", check, "validate WATCH.yaml (and its jobs) and exit");
  app.add_option("--log-level", log_level, "error, warn, info, debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug", "trace"}));
  app.footer(kWatchFooter);
  if (const int rc = parse(app, argc, argv); rc >= 0) return rc;
  log::set_level(log_level);
  io::install_av_log();
  if (check) {
    try {
      const WatchSpec spec = load_watch_file(file);
      std::printf("%s: ok (%zu folder(s), queue %s)\n", file.c_str(), spec.entries.size(),
                  spec.queue.c_str());
      return kExitOk;
    } catch (const Error& e) {
      std::fprintf(stderr, "wmbatch: %s\n", e.what());
      return e.exit_code();
    }
  }
  return run_daemon(file);
}

int main_status(int argc, char** argv) {
  CLI::App app{
      "wmbatch status: the state of a watch daemon's queue: counts by state, the running "
      "files with their progress, the last failures. Reads the queue file; the daemon need "
      "not run.",
      "wmbatch status"};
  std::string file;
  bool json = false;
  app.add_option("watch_file", file, "watch configuration (YAML)")
      ->required()
      ->type_name("WATCH.yaml");
  app.add_flag("--json", json, "print the same JSON as the status page's /api/status");
  if (const int rc = parse(app, argc, argv); rc >= 0) return rc;
  log::set_level("warn");
  return print_status(file, json);
}

}  // namespace wm::watch
