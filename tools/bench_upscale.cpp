// wmbench upscale: wmbatch's upscale pipeline against the ffmpeg CLI on the same clip, in the
// same run; with --model, a Real-ESRGAN network's speed (model only, and optionally end to end
// and against the PyTorch eager baseline script). Prints one JSON object.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/runner.h"
#include "src/base/json_text.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/realesrgan/realesrgan_bench_support.h"
#include "tools/bench.h"
#include "tools/bench_args.h"
#include "tools/bench_clip.h"

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

const char* kAbout =
    "  Upscales the clip with wmbatch (in process) and with\n"
    "  ffmpeg -i IN -vf scale=iw*S:ih*S:flags=KIND -c:v libx264 -preset P -crf C OUT\n"
    "  and prints frames, seconds and fps of both and their ratio as JSON.\n"
    "  --make WxH:SECONDS generates a clip with the ffmpeg CLI (testsrc2 + noise + a tone).\n"
    "  With --model NAME: a Real-ESRGAN network instead (wmbench upscale --model x --help).\n"
    "  With --devices: a batch over several devices (wmbench upscale --devices 0 --help).\n";

const char* kModelAbout =
    "  --model: realesr-animevideov3|realesr-general-x4v3|RealESRGAN_x4plus|RealESRGAN_x2plus|\n"
    "  RealESRGAN_x4plus_anime_6B, the full-size architecture with random weights. Model only:\n"
    "  --frames frames per call on device-resident input (fps, peak device MiB, achieved\n"
    "  TFLOP/s; --calls default 10 on CUDA, 1 on the CPU; --warmup 3 and 1). --e2e S: also a\n"
    "  whole upscale job on a generated S-second clip (decode -> model -> libx264 veryfast crf\n"
    "  18). --baseline tools/bench/realesrgan_baseline.py: runs the PyTorch script (python3,\n"
    "  same size, --baseline-frames per call) in its --baseline-modes (eager; channels_last;\n"
    "  compile = torch.compile max-autotune-no-cudagraphs on channels_last) and reports their\n"
    "  fps and speedup_vs_<mode>. Sizes default to 1920x1080 (SRVGG) and 960x540 (RRDB).\n"
    "  --trace FILE: two more calls under LibTorch's profiler, its Chrome trace written to FILE\n"
    "  (tools/gpu-checks/trace_summary.py FILE --kernels: the GPU's time by kernel).\n";

// A WxH clip of `seconds` at 25 fps written in process (libx264 veryfast crf 20, no audio),
// for hosts without the ffmpeg CLI. Returns false on failure.
bool write_clip_with_libav(const std::string& path, int width, int height, int seconds) {
  try {
    wm::bench::write_synthetic_clip(path, width, height, seconds * 25, "veryfast", 20);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmbench: writing %s: %s\n", path.c_str(), e.what());
    return false;
  }
}

// Creates (once) a WxH clip of `seconds` in `workdir` with the ffmpeg CLI, or io::VideoWriter
// where there is none; returns its path or an empty string.
std::string generated_clip(const std::string& workdir, const std::string& size,
                           const std::string& seconds) {
  const std::string input = workdir + "/clip_" + size + "_" + seconds + "s.mp4";
  if (std::filesystem::exists(input)) return input;
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
  if (rc == 0) return input;
  const auto [width, height] = wm::bench::parse_size("--size", size);
  return write_clip_with_libav(input, width, height, std::stoi(seconds)) ? input : "";
}

// Runs `command` and returns its stdout.
std::string capture(const std::string& command, int& status) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    status = -1;
    return out;
  }
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  status = ::pclose(pipe);
  return out;
}

int bench_upscale_model(int argc, char** argv) {
  std::string model, precision_text = "fp16", size, baseline;
  std::string workdir = "/tmp/wmbench", e2e, tuning, baseline_modes = "eager", trace;
  int frames = 4, calls = -1, warmup = -1, baseline_frames = 1;
  wm::Device device{wm::Device::Kind::kCuda, 0};
  wm::bench::Args args("wmbench upscale", kModelAbout);
  args.text("--model", &model, "NAME")
      .custom("--device", "cuda:0|cpu",
              [&](const std::string& v) { device = wm::bench::parse_device(v); })
      .choice("--precision", &precision_text, {"fp16", "bf16", "fp32"})
      .frame_size("--size", &size)
      .integer("--frames", &frames, 1)
      .integer("--calls", &calls, 1, "N")
      .integer("--warmup", &warmup, 0, "N")
      .text("--e2e", &e2e, "SECONDS")
      .text("--baseline", &baseline, "SCRIPT")
      .text("--baseline-modes", &baseline_modes, "eager,channels_last,compile")
      .integer("--baseline-frames", &baseline_frames, 1)
      .text("--tuning", &tuning, "KEY=V,...")
      .text("--trace", &trace, "FILE")
      .text("--workdir", &workdir, "DIR");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  wm::models::RealEsrganArch arch;
  try {
    arch = wm::models::realesrgan_preset(model);
  } catch (const std::exception& e) {
    return args.fail(std::string("--model: ") + e.what());
  }
  const bool cuda = device.kind == wm::Device::Kind::kCuda;
  const wm::Precision precision = wm::bench::parse_precision(precision_text);
  if (size.empty())
    size = arch.family == wm::models::RealEsrganArch::Family::kSrvgg ? "1920x1080" : "960x540";
  const auto [width, height] = wm::bench::parse_size("--size", size);
  if (calls < 0) calls = cuda ? 10 : 1;
  if (warmup < 0) warmup = cuda ? 3 : 1;

  nlohmann::json result = {{"bench", "upscale-model"},
                           {"model", model},
                           {"arch", arch.describe()},
                           {"device", device.str()},
                           {"precision", precision_text},
                           {"width", width},
                           {"height", height},
                           {"scale", arch.scale},
                           {"frames_per_call", frames},
                           {"calls", calls},
                           {"tuning", tuning}};
  try {
    const wm::models::RealEsrganBench b = wm::models::bench_realesrgan(
        arch, device, precision, frames, height, width, calls, warmup, tuning, 0, trace);
    result["model_fps"] = b.fps;
    result["model_seconds"] = b.seconds;
    result["model_tflops"] = b.tflops;
    result["model_peak_mib"] = b.peak_mib;
    result["gflop_per_frame"] = arch.flops_per_input_pixel() * width * height / 1e9;
    result["output_mean"] = b.output_mean;
    if (!trace.empty()) {
      result["trace_written"] = b.activity.trace_written;
      result["gpu_busy_ms"] = b.activity.busy_ms;
      result["gpu_span_ms"] = b.activity.span_ms;
      result["gpu_kernels"] = b.activity.kernels;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmbench: %s\n", e.what());
    return 1;
  }

  if (!e2e.empty()) {
    std::filesystem::create_directories(workdir);
    const std::string clip = generated_clip(workdir, size, e2e);
    if (clip.empty()) {
      std::fprintf(stderr, "wmbench: could not generate a %s clip\n", size.c_str());
      return 1;
    }
    const std::string weights = workdir + "/" + model + "_random.safetensors";
    wm::models::write_random_realesrgan(arch, weights, 1234);
    wm::JobSpec job;
    job.file = "wmbench";
    job.dir = workdir;
    job.name = "bench";
    job.inputs = {clip};
    job.output = workdir + "/" + model + "_out.mp4";
    job.on_exists = wm::OnExists::kOverwrite;
    job.model.kind = "realesrgan";
    job.model.weights = weights;
    job.model.precision = precision;
    job.model.tuning = tuning;
    job.slice_frames = frames;
    if (cuda) {
      job.devices = "list";
      job.device_ids = {device.index};
    }
    job.encode.preset = "veryfast";
    job.encode.crf = 18;
    wm::sched::RunOptions options;
    options.progress = wm::sched::ProgressStyle::kNone;
    wm::sched::Progress progress(wm::sched::ProgressStyle::kNone);
    const double t0 = now();
    const wm::sched::JobOutcome outcome = wm::sched::run_job(job, options, progress);
    const double seconds = now() - t0;
    if (outcome.exit_code != 0) {
      std::fprintf(stderr, "wmbench: job failed: %s\n", outcome.inputs.front().error.c_str());
      return outcome.exit_code;
    }
    result["e2e_frames"] = outcome.frames;
    result["e2e_seconds"] = seconds;
    result["e2e_fps"] = outcome.frames / seconds;
    result["e2e_over_model"] = outcome.frames / seconds / result["model_fps"].get<double>();
    result["e2e_peak_rss_mib"] = outcome.peak_rss_mib;
    for (const auto& [name, value] : outcome.inputs.front().metrics) result["e2e_" + name] = value;
  }

  if (!baseline.empty()) {
    int status = 0;
    const std::string out =
        capture("python3 '" + baseline + "' --model " + model + " --size " + size + " --calls " +
                    std::to_string(std::max(calls * frames / baseline_frames, 4)) + " --frames " +
                    std::to_string(baseline_frames) + " --modes " + baseline_modes + " --device " +
                    (cuda ? "cuda:" + std::to_string(device.index) : "cpu"),
                status);
    try {
      const nlohmann::json base = nlohmann::json::parse(out.substr(out.find('{')));
      result["baseline"] = base;
      const double ours = result["model_fps"].get<double>();
      result["speedup_vs_baseline"] = ours / base.at("fps").get<double>();
      if (base.contains("modes")) {
        for (const auto& [mode, entry] : base["modes"].items()) {
          result["speedup_vs_" + mode] = ours / entry.at("fps").get<double>();
        }
      }
    } catch (const std::exception&) {
      result["baseline_error"] = "status " + std::to_string(status) + ": " + out;
    }
  }
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}

}  // namespace

int bench_upscale(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--devices") return bench_upscale_devices(argc, argv);
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--model") return bench_upscale_model(argc, argv);
  }
  std::string input, make = "1920x1080:10", kind = "lanczos", preset = "veryfast";
  std::string workdir = "/tmp/wmbench";
  int scale = 2, crf = 18;
  bool skip_ffmpeg = false;
  wm::bench::Args args("wmbench upscale", kAbout);
  args.text("--input", &input, "FILE")
      .custom("--make", "WxH:SECONDS",
              [&](const std::string& v) {
                wm::bench::parse_clip_shape("--make", v);  // checked here, read below
                make = v;
              })
      .integer("--scale", &scale, 1)
      .choice("--kind", &kind, {"lanczos", "bicubic"})
      .text("--preset", &preset)
      .integer("--crf", &crf, 0)
      .text("--workdir", &workdir, "DIR")
      .toggle("--skip-ffmpeg", &skip_ffmpeg);
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  std::filesystem::create_directories(workdir);
  if (input.empty()) {
    const auto colon = make.find(':');
    input = generated_clip(workdir, make.substr(0, colon), make.substr(colon + 1));
    if (input.empty()) {
      std::fprintf(stderr, "wmbench: could not generate a %s clip in %s\n", make.c_str(),
                   workdir.c_str());
      return 1;
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
  std::printf("%s\n", wm::json_dump(result, 2).c_str());
  return 0;
}
