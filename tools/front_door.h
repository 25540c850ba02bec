// The front door of wmbatch: what a user coming from Video2X, Real-ESRGAN's script or ffmpeg
// types first. One-line commands (`wmbatch upscale IN... -o OUT --model NAME`, `wmbatch
// decode-latents ...`) that build the same validated job a job file holds (src/job_command.h),
// the run options they share with job runs (-y/-n, --report, --models-dir, ...), the models folder
// (`wmbatch models`), the version text, the hint for a video given where a job file is expected,
// and the run's summary. tools/wmbatch.cpp dispatches here.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/runner.h"
#include "src/job_spec.h"

namespace wm::tools {

// What the main program does before a run: the log level, libav's log, the signal handlers.
using StartFn = void (*)(const std::string& log_level);

// The options every run has, job files and one-liners alike.
struct RunFlags {
  std::string report;
  std::string progress = "auto";
  std::string log_level = "info";
  std::string devices;
  std::string models_dir;
  bool keep_going = true;
  bool stop_on_error = false;
  bool overwrite = false;  // -y
  bool skip = false;       // -n
  // RunOptions from these (progress style, keep_going, report, devices, on_exists).
  sched::RunOptions run_options(const std::atomic<bool>* cancel) const;
};
void add_run_flags(CLI::App& app, RunFlags& flags);

// "auto", "bar", "plain", "farm", "none" (anything else: auto).
sched::ProgressStyle parse_style(const std::string& s);

// A usage text of our own in place of CLI11's one line (which cannot show several forms).
void set_usage(CLI::App& app, const std::string& usage);

// `wmbatch upscale ...` / `wmbatch decode-latents ...` (argv[0] is the command). Returns the exit
// code.
int main_command_job(Task task, int argc, char** argv, const std::atomic<bool>* cancel,
                     StartFn start);

// `wmbatch models [--models-dir DIR]`: the models folder, with kind, scale and size of each file,
// and the released names it lacks with where they come from.
int main_models(int argc, char** argv);

// `wmbatch --version`: wmbatch's, FFmpeg's libraries', LibTorch's and CUDA's versions, without
// loading LibTorch.
std::string version_text();

// A video, image or tensor file given where a job file is expected: the line that says so and
// shows the one-line command; "" for anything else.
std::string media_hint(const std::string& path);

// The run's summary on stderr: counts, each failure, and the outputs written (the first 20).
void print_summary(const std::vector<sched::JobOutcome>& outcomes);

}  // namespace wm::tools
