// The front door (front_door.h): one-line commands, the models folder, versions, hints, summary.
#include "tools/front_door.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "io/version.h"
#include "scheduler/preflight.h"
#include "src/base/error.h"
#include "src/base/std_streams.h"
#include "src/job_command.h"
#include "src/media_names.h"
#include "src/models/catalog.h"
#include "src/models/torch_side.h"

namespace wm::tools {
namespace {

namespace fs = std::filesystem;

class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_usage(const CLI::App*, std::string) const override { return usage_ + "\n"; }

 private:
  std::string usage_;
};

// `arg` as a shell reads it back.
std::string shell_quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_./:=,+-@%") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t(1) << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
  } else if (bytes >= (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / 1024.0);
  }
  return buf;
}

// The CUDA driver's version, read from libcuda without initialising it; "" when there is none.
std::string cuda_driver_version() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return {};
  using GetVersion = int (*)(int*);
  auto get = reinterpret_cast<GetVersion>(::dlsym(lib, "cuDriverGetVersion"));
  int version = 0;
  std::string out;
  if (get && get(&version) == 0 && version > 0) {
    out = std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  }
  ::dlclose(lib);
  return out;
}

// Whether the start of a file is binary (a NUL byte): no job file is.
bool looks_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char buf[4096];
  in.read(buf, sizeof buf);
  const std::streamsize n = in.gcount();
  return std::find(buf, buf + n, '\0') != buf + n;
}

const char* kCommandExamples = R"(Examples:
  wmbatch upscale in.mp4 -o out.mp4                              lanczos x2 (built in)
  wmbatch upscale in.mp4 -o out.mkv --model realesr-animevideov3  a released model by name
  wmbatch upscale clips/ -o out/ --model models/x4.pth -s 2 -y     a folder, into a folder
  wmbatch upscale in.mp4 -o out.mp4 --model realesr-animevideov3 --print-job > job.yaml
  ffmpeg -i in.mp4 -f nut - | wmbatch upscale - -o - -f nut | ffmpeg -i - out.mp4

Models by name: `wmbatch models` lists the models folder (--models-dir, $WMBATCH_MODELS, else
~/.local/share/wmbatch/models) and where the released files come from (docs/models.md).
Every option is a key of a job file (docs/job-format.md); exit codes: wmbatch --help.)";

}  // namespace

sched::ProgressStyle parse_style(const std::string& s) {
  using sched::ProgressStyle;
  if (s == "bar") return ProgressStyle::kBar;
  if (s == "plain") return ProgressStyle::kPlain;
  if (s == "farm") return ProgressStyle::kFarm;
  if (s == "none") return ProgressStyle::kNone;
  return ProgressStyle::kAuto;
}

sched::RunOptions RunFlags::run_options(const std::atomic<bool>* cancel) const {
  sched::RunOptions options;
  options.progress = parse_style(progress);
  options.keep_going = keep_going && !stop_on_error;
  options.report_path = report;
  options.cancel = cancel;
  options.devices = devices;
  if (overwrite) options.on_exists = OnExists::kOverwrite;
  if (skip) options.on_exists = OnExists::kSkip;
  return options;
}

void add_run_flags(CLI::App& app, RunFlags& flags) {
  app.add_option("--report", flags.report,
                 "write a JSON summary per job (frames, seconds, fps, "
                 "peak memory) to FILE (new, or a previous report: nothing else is replaced)")
      ->type_name("FILE");
  app.add_option("--progress", flags.progress,
                 "progress display: auto (bar on a TTY, else lines), "
                 "bar, plain, farm ('Progress: N%' lines), none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "farm", "none"}))
      ->type_name("STYLE");
  app.add_flag("--keep-going", flags.keep_going,
               "after a failed input, go on with the others (the default)");
  app.add_flag("--stop-on-error", flags.stop_on_error, "start no input after a failure");
  app.add_option("--log-level", flags.log_level, "error, warn, info, debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug", "trace"}))
      ->type_name("LEVEL");
  app.add_option("--devices", flags.devices,
                 "cpu, auto (every visible GPU) or GPU indices like 0,1: replaces the jobs' "
                 "devices:")
      ->type_name("LIST");
  app.add_option("--models-dir", flags.models_dir,
                 "the models folder, where model names are looked up (default: "
                 "$WMBATCH_MODELS, else ~/.local/share/wmbatch/models)")
      ->type_name("DIR");
  auto* y = app.add_flag("-y,--overwrite", flags.overwrite,
                         "overwrite outputs that exist (on_exists: overwrite)");
  app.add_flag("-n,--skip-existing", flags.skip, "skip outputs that exist (on_exists: skip)")
      ->excludes(y);
}

void set_usage(CLI::App& app, const std::string& usage) {
  app.formatter(std::make_shared<UsageFormatter>(usage));
}

int main_command_job(Task task, int argc, char** argv, const std::atomic<bool>* cancel,
                     StartFn start) {
  const bool upscale = task == Task::kUpscale;
  const std::string command = upscale ? "upscale" : "decode-latents";
  const std::string origin = "wmbatch " + command;
  CLI::App app{upscale ? "wmbatch upscale: upscale videos, image sequences and images with a "
                         "model, as a job file would (docs/job-format.md)."
                       : "wmbatch decode-latents: decode video latents (.safetensors) to video "
                         "with a VAE, as a job file would (docs/job-format.md).",
               origin};
  set_usage(app, upscale ? "Usage: wmbatch upscale IN... -o OUT [--model NAME|PATH] [--scale N] "
                           "[OPTIONS]"
                         : "Usage: wmbatch decode-latents IN... -o OUT --model NAME|PATH "
                           "[OPTIONS]");
  app.footer(kCommandExamples);
  CommandJob job;
  job.task = task;
  job.name = command;
  std::vector<std::string> positional, dashed;
  bool fp32 = false, print_job = false;
  app.add_option("inputs", positional,
                 "inputs: files, globs ('clips/*.mp4'), folders (their files in name order), "
                 "'-' for standard input (MPEG-TS, Matroska, NUT, Y4M)")
      ->type_name("IN");
  app.add_option("-i,--input", dashed, "an input, as ffmpeg and Video2X take it (may repeat)")
      ->type_name("IN");
  app.add_option("-o,--output", job.output,
                 "an output file, a folder (FOLDER/: one output per input, named as it), a "
                 "template (out/{stem}_x4{ext}: {stem} {ext} {job} {dir}), or '-' for standard "
                 "output (with --format)")
      ->type_name("OUT");
  app.add_option("-m,--model", job.model,
                 upscale ? "lanczos (default) or bicubic (built in), a model name of the models "
                           "folder (realesr-animevideov3: `wmbatch models`), or a weights file "
                           "(.pth/.safetensors Real-ESRGAN, .pt TorchScript, .pt2 AOTInductor)"
                         : "a model name of the models folder (Wan2.1_VAE) or a .safetensors "
                           "weights file (with --kind wan2.1-vae or seedvr2-vae)")
      ->type_name("NAME|PATH");
  app.add_option("--kind", job.kind, "the model's kind when its file does not tell (model.kind)")
      ->type_name("KIND");
  if (upscale) {
    app.add_option("-s,--scale", job.scale,
                   "output scale (built-in models: 2, 3, 4; Real-ESRGAN: 1-8, resized from "
                   "the network's)")
        ->type_name("N");
  }
  app.add_option("-t,--tile", job.tile,
                 "tile size in input pixels (bounds memory), auto (from free memory), or 0/none")
      ->type_name("N|auto");
  app.add_option("--precision", job.precision, "fp32 (default), bf16, fp16 (GPUs)")->type_name("P");
  app.add_flag("--fp32", fp32, "--precision fp32 (as Real-ESRGAN's script takes it)");
  if (!upscale) {
    app.add_option("--fps", job.fps, "output frame rate (default: the file's, else 16)")
        ->type_name("FPS");
  }
  app.add_option("--codec", job.codec, "video encoder (default libx264; y4m: wrapped_avframe)")
      ->type_name("CODEC");
  app.add_option("--crf", job.crf, "quality, 0-51 (default 18)")->type_name("N");
  app.add_option("--preset", job.preset, "encoder preset (default medium)")->type_name("NAME");
  app.add_option("--pix-fmt", job.pix_fmt, "output pixel format (default: the source's)")
      ->type_name("FMT");
  app.add_option("-f,--format", job.format,
                 "the container of standard output (-o -): mkv, nut, y4m or ts")
      ->type_name("FMT");
  app.add_flag("--print-job", print_job,
               "print the job as YAML (save it as a job file: wmbatch job.yaml) and exit");
  RunFlags flags;
  add_run_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  job.inputs = dashed;
  job.inputs.insert(job.inputs.end(), positional.begin(), positional.end());
  if (fp32) {
    if (!job.precision.empty() && job.precision != "fp32") {
      std::fprintf(stderr, "%s: --fp32 and --precision %s disagree\n", origin.c_str(),
                   job.precision.c_str());
      return kExitUsage;
    }
    job.precision = "fp32";
  }
  job.on_exists = flags.overwrite ? "overwrite" : flags.skip ? "skip" : "";
  job.devices = flags.devices;  // in the job, so that --print-job shows it
  flags.devices.clear();
  job.cwd = fs::current_path().string();
  std::string rerun = "wmbatch";
  for (int i = 0; i < argc; ++i) rerun += " " + shell_quoted(argv[i]);
  set_models_dir(flags.models_dir);
  start(flags.log_level);
  std::vector<sched::JobOutcome> outcomes;
  int rc = 0;
  try {
    JobSpec spec = parse_command_job(job, origin, rerun);
    expand_inputs(spec);  // a glob that matches nothing stops the command here (exit 66)
    if (print_job) {
      sched::preflight({spec});
      std::fputs(command_job_yaml(job).c_str(), stdout);
      return 0;
    }
    rc = sched::run_jobs({spec}, flags.run_options(cancel), &outcomes);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", command_error_text(e.what(), origin).c_str());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", origin.c_str(), e.what());
    return kExitSoftware;
  }
  print_summary(outcomes);
  return rc;
}

int main_models(int argc, char** argv) {
  CLI::App app{
      "wmbatch models: the models folder, where --model NAME and `weights: NAME` are looked "
      "up: its files with kind, scale and size, and the released names it lacks with where "
      "their official files come from (wmbatch downloads nothing).",
      "wmbatch models"};
  std::string dir;
  app.add_option("--models-dir", dir,
                 "the models folder (default: $WMBATCH_MODELS, else "
                 "$XDG_DATA_HOME/wmbatch/models, else ~/.local/share/wmbatch/models)")
      ->type_name("DIR");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  set_models_dir(dir);
  try {
    const ModelsFolder folder = models_folder();
    const ModelCatalog& catalog = model_catalog();
    std::error_code ec;
    const bool there = fs::is_directory(folder.path, ec);
    std::printf("Models folder: %s (%s)%s\n", folder.path.c_str(),
                folder.from == "HOME" ? "the default" : ("from " + folder.from).c_str(),
                there ? "" : ": does not exist yet");
    const std::vector<ModelFile> files = list_models(folder.path);
    if (files.empty()) {
      std::printf("  no model files (.pth, .safetensors, .pt, .pt2)\n");
    } else {
      std::printf("  %-28s %-12s %-6s %10s  %s\n", "NAME", "KIND", "SCALE", "SIZE", "FILE");
      for (const ModelFile& m : files) {
        const std::string scale = m.scale > 0 ? "x" + std::to_string(m.scale) : "-";
        std::printf("  %-28s %-12s %-6s %10s  %s\n", m.name.c_str(),
                    m.kind.empty() ? "?" : m.kind.c_str(), scale.c_str(), size_text(m.size).c_str(),
                    m.file.c_str());
      }
    }
    std::vector<const ReleasedModel*> missing;
    for (const ReleasedModel& m : catalog.models) {
      const bool have = std::any_of(files.begin(), files.end(),
                                    [&](const ModelFile& f) { return f.released == &m; });
      if (!have) missing.push_back(&m);
    }
    if (!missing.empty()) {
      std::printf("Released names not in the folder (put the file there under its name):\n");
      for (const ReleasedModel* m : missing) {
        const std::string scale = m->scale > 0 ? "x" + std::to_string(m->scale) : "-";
        std::printf("  %-28s %-12s %-6s %s\n    %s\n", m->name.c_str(), m->kind.c_str(),
                    scale.c_str(), m->files.front().c_str(), m->source.c_str());
      }
    }
    std::printf("Table of released names: %s\n",
                catalog.path.empty() ? "none found" : catalog.path.c_str());
    std::printf("Use: wmbatch upscale IN -o OUT --model NAME (docs/models.md)\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}

std::string version_text() {
  const models::TorchBuildInfo torch = models::torch_build_info();
  std::string text = "wmbatch 0.1.0\n";
  text += "FFmpeg: " + io::libav_versions() + "\n";
  text += "LibTorch: " + (torch.torch_version.empty() ? std::string("?") : torch.torch_version) +
          (torch.cuda ? " with CUDA" : ", CPU only") + "; loaded when a job needs it, from " +
          torch.module + (torch.module_present ? "" : " (missing)") + "\n";
  const std::string driver = cuda_driver_version();
  if (torch.cuda) {
    text += "CUDA: built with " +
            (torch.cuda_version.empty() ? std::string("?") : torch.cuda_version) + "; driver " +
            (driver.empty() ? std::string("none found") : driver) + "\n";
  } else {
    text += "CUDA: not in this build" +
            (driver.empty() ? std::string() : " (driver " + driver + " found)") + "\n";
  }
  return text;
}

std::string media_hint(const std::string& path) {
  MediaName kind = media_name_kind(path);
  std::error_code ec;
  if (kind == MediaName::kNone && fs::is_regular_file(path, ec) && looks_binary(path)) {
    kind = MediaName::kVideo;  // no YAML file holds a NUL byte
  }
  if (kind == MediaName::kNone) return {};
  const fs::path p(path);
  const std::string out = (p.parent_path() / (p.stem().string() + "_x2")).string() +
                          (p.has_extension() ? p.extension().string() : ".mkv");
  switch (kind) {
    case MediaName::kTensor:
      return path +
             " is a tensor file, not a job file; to decode latents: wmbatch decode-latents " +
             shell_quoted(path) + " -o " +
             shell_quoted((p.parent_path() / (p.stem().string() + ".mp4")).string()) +
             " --model Wan2.1_VAE (wmbatch decode-latents --help)";
    case MediaName::kImage:
      return path + " is an image, not a job file; to upscale it: wmbatch upscale " +
             shell_quoted(path) + " -o " + shell_quoted(out) +
             " (--model NAME for a neural model; wmbatch upscale --help)";
    default:
      return path + " is a video, not a job file; to upscale it: wmbatch upscale " +
             shell_quoted(path) + " -o " + shell_quoted(out) +
             " (--model NAME for a neural model; wmbatch upscale --help)";
  }
}

void print_summary(const std::vector<sched::JobOutcome>& outcomes) {
  int done = 0, skipped = 0, failed = 0;
  std::vector<std::string> written;
  for (const auto& job : outcomes) {
    for (const auto& in : job.inputs) {
      done += in.state == sched::InputState::kDone;
      skipped += in.state == sched::InputState::kSkipped;
      failed += in.state == sched::InputState::kFailed;
      if (in.state == sched::InputState::kDone) {
        written.push_back(in.output == kStdoutName ? "standard output" : in.output);
      }
    }
  }
  std::fprintf(stderr, "wmbatch: %d done, %d skipped, %d failed\n", done, skipped, failed);
  for (const auto& job : outcomes) {
    for (const auto& in : job.inputs) {
      if (in.state == sched::InputState::kFailed) {
        std::fprintf(stderr, "  failed: %s\n", in.error.c_str());
      }
    }
  }
  constexpr size_t kListed = 20;
  for (size_t i = 0; i < written.size() && i < kListed; ++i) {
    std::fprintf(stderr, "  wrote: %s\n", written[i].c_str());
  }
  if (written.size() > kListed) {
    std::fprintf(stderr, "  ... and %zu more (--report FILE lists every output)\n",
                 written.size() - kListed);
  }
}

}  // namespace wm::tools
