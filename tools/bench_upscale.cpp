// wmbench upscale: wmbatch's upscale pipeline against the ffmpeg CLI on the same clip, in the
// same run. Prints one JSON object.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/video_reader.h"
#include "scheduler/runner.h"
#include "tools/bench.h"

namespace {

int run(const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* kUsage =
    "wmbench upscale [--input FILE | --make WxH:SECONDS] [--scale 2] [--kind lanczos]\n"
    "                [--preset veryfast] [--crf 18] [--workdir DIR] [--skip-ffmpeg]\n"
    "  Upscales the clip with wmbatch (in process) and with\n"
    "  ffmpeg -i IN -vf scale=iw*S:ih*S:flags=KIND -c:v libx264 -preset P -crf C OUT\n"
    "  and prints frames, seconds and fps of both and their ratio as JSON.\n"
    "  --make generates a clip with the ffmpeg CLI (testsrc2 + noise + a tone).\n";

}  // namespace

int bench_upscale(int argc, char** argv) {
  std::string input, make = "1920x1080:10", kind = "lanczos", preset = "veryfast";
  std::string workdir = "/tmp/wmbench";
  int scale = 2, crf = 18;
  bool skip_ffmpeg = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--input")
      input = value();
    else if (a == "--make")
      make = value();
    else if (a == "--scale")
      scale = std::stoi(value());
    else if (a == "--kind")
      kind = value();
    else if (a == "--preset")
      preset = value();
    else if (a == "--crf")
      crf = std::stoi(value());
    else if (a == "--workdir")
      workdir = value();
    else if (a == "--skip-ffmpeg")
      skip_ffmpeg = true;
    else {
      std::fputs(kUsage, stderr);
      return a == "--help" ? 0 : 64;
    }
  }
  std::filesystem::create_directories(workdir);
  if (input.empty()) {
    const auto x = make.find('x'), colon = make.find(':');
    const std::string size = make.substr(0, colon), seconds = make.substr(colon + 1);
    (void)x;
    input = workdir + "/clip_" + size + "_" + seconds + "s.mp4";
    if (!std::filesystem::exists(input)) {
      const int rc =
          run({"ffmpeg",
               "-v",
               "error",
               "-y",
               "-f",
               "lavfi",
               "-i",
               "testsrc2=size=" + size + ":rate=25:duration=" + seconds + ",noise=alls=12:allf=t",
               "-f",
               "lavfi",
               "-i",
               "sine=frequency=440:duration=" + seconds,
               "-c:v",
               "libx264",
               "-preset",
               "medium",
               "-crf",
               "20",
               "-pix_fmt",
               "yuv420p",
               "-c:a",
               "aac",
               "-shortest",
               input});
      if (rc != 0) {
        std::fprintf(stderr, "wmbench: could not generate %s\n", input.c_str());
        return 1;
      }
    }
  }
  input = std::filesystem::absolute(input).string();
  const int64_t frames = wm::io::VideoReader(input).info().frames_estimate;

  wm::JobSpec job;
  job.file = "wmbench";
  job.dir = workdir;
  job.name = "bench";
  job.inputs = {input};
  job.output = workdir + "/wmbatch_out.mp4";
  job.on_exists = wm::OnExists::kOverwrite;
  job.model.kind = kind;
  job.model.scale = scale;
  job.encode.preset = preset;
  job.encode.crf = crf;
  wm::sched::RunOptions options;
  options.progress = wm::sched::ProgressStyle::kNone;
  wm::sched::Progress progress(wm::sched::ProgressStyle::kNone);
  double t0 = now();
  const wm::sched::JobOutcome outcome = wm::sched::run_job(job, options, progress);
  const double ours = now() - t0;
  if (outcome.exit_code != 0) {
    std::fprintf(stderr, "wmbench: wmbatch failed: %s\n", outcome.inputs.front().error.c_str());
    return outcome.exit_code;
  }

  nlohmann::json result = {{"bench", "upscale"},
                           {"input", input},
                           {"kind", kind},
                           {"scale", scale},
                           {"preset", preset},
                           {"crf", crf},
                           {"frames", outcome.frames},
                           {"frames_probed", frames},
                           {"wmbatch_seconds", ours},
                           {"wmbatch_fps", outcome.frames / ours},
                           {"wmbatch_peak_rss_mib", outcome.peak_rss_mib},
                           {"cores", int(std::thread::hardware_concurrency())}};
  for (const auto& [name, value] : outcome.inputs.front().metrics) result[name] = value;
  if (!skip_ffmpeg) {
    const std::string flags = kind == "bicubic" ? "bicubic" : "lanczos";
    t0 = now();
    const int rc = run(
        {"ffmpeg", "-v", "error", "-y", "-i", input, "-vf",
         "scale=iw*" + std::to_string(scale) + ":ih*" + std::to_string(scale) + ":flags=" + flags,
         "-c:v", "libx264", "-preset", preset, "-crf", std::to_string(crf),
         workdir + "/ffmpeg_out.mp4"});
    const double theirs = now() - t0;
    if (rc != 0) {
      std::fprintf(stderr, "wmbench: ffmpeg failed (%d)\n", rc);
      return 1;
    }
    result["ffmpeg_seconds"] = theirs;
    result["ffmpeg_fps"] = outcome.frames / theirs;
    result["ratio"] = theirs / ours;  // > 1: wmbatch is faster
  }
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}
