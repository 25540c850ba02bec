// wmbench vae-job: an end-to-end decode_latents job (latents file → Wan2.1 VAE → H.264 .mp4,
// through the same entry the wmbatch CLI uses) against decode only (host latents → host frames)
// on the same latents, with the same model file and slices. Prints one JSON object.
//
//   wmbench vae-job [--dim 96] [--latent-frames T] [--height H] [--width W]
//                   [--dtype fp32|bf16|fp16] [--device cpu|cuda:N] [--slice-frames S]
//                   [--tokens N] [--preset veryfast] [--crf 18] [--encode-threads N]
//                   [--encode-options KEY=V,...]
//                   [--warmup N] [--job-warmup N] [--iters N] [--threads N] [--seed N]
//                   [--weights-dtype f32|bf16] [--tuning KEY=V,...]
//                   [--latent-frames-long N] [--long-job 0|1] [--batch N] [--keep DIR]
//
// In a temporary folder (removed afterwards; --keep DIR writes to DIR and leaves it) it writes
// random Wan2.1 VAE weights in the full checkpoint layout (wan21_vae_layout; conv weights and
// biases uniform in ±1/√fan_in, RMSNorm gammas 1), random normal latents [16, T, H/8, W/8]
// ("latent", metadata fps 16) and a job YAML (task decode_latents, libx264 PRESET crf CRF
// yuv420p, devices and precision from the options), then:
//  1. decode only: make_model() from the same weights file, one session, the latents cut into
//     the job's slices (S latent frames, 0: the job's automatic slices, auto_decode_slice_frames),
//     timed from host latents to host frames after --warmup untimed runs (cuDNN autotuning);
//     outputs are freed slice by slice. The model is released before the job runs.
//  2. the job: run_job_files() on the YAML, --job-warmup untimed runs first (the job is run
//     whole again rather than on a shorter version, so that every slice shape, the encoder, the
//     pinned host allocator and the page cache are warm), then --iters timed runs. Each run
//     loads the weights file and builds its model, as a wmbatch run does: `ratio` compares the
//     whole job's wall time, `ratio_input` the input's processing only (no job-file parse and no
//     weights file load, but the first session's device copy of the weights, the graph, encoder
//     flush, fsync and verify), and the job's per-stage seconds say where the time went.
//  3. the output is probed (decoded with io::VideoReader) for its frame count and size.
//  4. with --latent-frames-long N: decode only on N latent frames after a warm-up over one slice
//     of each shape; its peak GPU memory against the short run's (the "10× longer sequence"
//     check). --long-job 1 also runs the job on them (one run).
//  5. with --batch N: one job over N copies of the latents file (--iters timed runs), where each
//     input's encoder flush, fsync and verify overlap the next input's model work; `batch.ratio`
//     is its fps against decode only.
// Peak GPU memory is LibTorch's allocated peak (src/models/bench_support.h) per phase; peak RSS is
// per phase when the kernel lets /proc/self/clear_refs reset it (`rss_per_phase`).
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/video_reader.h"
#include "parallel/memory_budget.h"
#include "scheduler/runner.h"
#include "src/base/error.h"
#include "src/base/json_text.h"
#include "src/geometry.h"
#include "src/model.h"
#include "src/models/bench_support.h"
#include "src/models/seedvr2/seedvr2_layout.h"
#include "src/models/wan21/wan21_bench_support.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tools/bench.h"
#include "tools/bench_vae_common.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct Options {
  std::string kind = "wan2.1-vae";  // or seedvr2-vae (full official architecture)
  int dim = 96;
  int latent_frames = 5;
  int height = 256;
  int width = 256;
  std::string dtype = "fp32";
  std::string device = "cpu";
  int slice_frames = 0;
  int tokens = 3;
  std::string preset = "veryfast";
  int crf = 18;
  int encode_threads = 0;
  std::string encode_options;  // "key=value,..." → the job's encode.options
  int warmup = 1;
  int job_warmup = 1;
  int iters = 1;
  int threads = 0;
  uint64_t seed = 1;
  std::string weights_dtype = "f32";
  std::string tuning;
  int latent_frames_long = 0;
  bool long_job = false;
  std::string keep;
  int max_gpu_gib = 0;
  int pinned_mib = 0;  // the job's offload.pinned_mib (0: the default)
  int batch = 0;       // inputs of the batch job (0: none)
};

const char* kAbout =
    "  End-to-end decode_latents job (latents → VAE → libx264 .mp4) vs decode only on the same\n"
    "  latents and model file; H and W are output pixels (multiples of 8).\n";

// Fills `o` and `device`. Returns -1 when the benchmark should run, else the exit status (the
// usage or the one-line error printed).
int parse(int argc, char** argv, Options& o, wm::Device& device) {
  wm::bench::Args args("wmbench vae-job", kAbout);
  args.choice("--kind", &o.kind, {"wan2.1-vae", "seedvr2-vae"});
  wm::bench::add_shared_flags(args, o);
  args.integer("--tokens", &o.tokens, 1)
      .text("--preset", &o.preset)
      .integer("--crf", &o.crf, 0)
      .integer("--encode-threads", &o.encode_threads, 0, "N")
      .text("--encode-options", &o.encode_options, "KEY=V,...")
      .integer("--job-warmup", &o.job_warmup, 0, "N")
      .choice("--weights-dtype", &o.weights_dtype, {"f32", "bf16"})
      .integer("--latent-frames-long", &o.latent_frames_long, 0, "N")
      .boolean("--long-job", &o.long_job)
      .integer("--batch", &o.batch, 0, "N")
      .text("--keep", &o.keep, "DIR");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  if (o.height % 8 != 0 || o.width % 8 != 0) {
    return args.fail("--height and --width are output pixels and must be multiples of 8");
  }
  if (o.preset.empty() || o.preset.find_first_of(" \t\n:{}[],#'\"") != std::string::npos) {
    return args.fail("--preset: expected an x264 preset name, got '" + o.preset + "'");
  }
  if (o.encode_options.find_first_of("'\n") != std::string::npos) {
    return args.fail("--encode-options: quotes and newlines are not allowed");
  }
  device = wm::bench::parse_device(o.device);  // checked by --device
  return -1;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// splitmix64: fast, good enough for benchmark weights.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float bound) {  // in [-bound, bound)
    return (float(next() >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * bound;
  }
};

uint16_t to_bf16(float f) {  // round to nearest even (values here are finite)
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The whole checkpoint layout with make_wan21_vae_random's distribution: a weight's fan-in is
// the product of its dimensions after the first; a 1-D bias takes the bound of the weight before
// it; gammas are 1.
void write_random_weights(const std::string& path, const wm::ModelConfig& config, bool bf16,
                          uint64_t seed) {
  std::vector<wm::models::Wan21Param> layout;
  if (config.kind == "seedvr2-vae") {
    // The official decoder's keys (seedvr2::layout); GroupNorm weights 1 (their biases then
    // take the bound of the weight before them, as any bias here).
    for (const wm::models::seedvr2::ParamSpec& p : wm::models::seedvr2::layout({})) {
      if (p.decoder) layout.push_back({p.key, p.shape, true});
    }
  } else {
    layout = wm::models::wan21_vae_layout(config);
  }
  Random rng{seed * 0x2545f4914f6cdd1dull + 1};
  std::vector<std::vector<float>> f32(layout.size());
  std::vector<std::vector<uint16_t>> b16(layout.size());
  std::vector<wm::io::TensorEntry> entries;
  int64_t fan_in = 1;
  for (size_t i = 0; i < layout.size(); ++i) {
    const wm::models::Wan21Param& p = layout[i];
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    const bool gamma = (p.key.size() > 6 && p.key.compare(p.key.size() - 6, 6, ".gamma") == 0) ||
                       (p.shape.size() == 1 && p.key.find("norm") != std::string::npos &&
                        p.key.compare(p.key.size() - 7, 7, ".weight") == 0);
    if (!gamma && p.shape.size() > 1) {
      fan_in = 1;
      for (size_t d = 1; d < p.shape.size(); ++d) fan_in *= p.shape[d];
    }
    const float bound = float(1.0 / std::sqrt(double(fan_in)));
    std::vector<float> values(size_t(n), 1.0f);
    if (!gamma) {
      for (float& v : values) v = rng.uniform(bound);
    }
    wm::io::TensorEntry e;
    e.name = p.key;
    e.shape = p.shape;
    if (bf16) {
      b16[i].resize(values.size());
      for (size_t k = 0; k < values.size(); ++k) b16[i][k] = to_bf16(values[k]);
      e.dtype = "BF16";
      e.data = b16[i].data();
      e.bytes = b16[i].size() * 2;
    } else {
      f32[i] = std::move(values);
      e.dtype = "F32";
      e.data = f32[i].data();
      e.bytes = f32[i].size() * 4;
    }
    entries.push_back(e);
  }
  wm::io::write_safetensors(path, entries, {{"format", "pt"}, {"source", "wmbench vae-job"}});
}

wm::Planar random_latents(int channels, int frames, int height, int width, uint64_t seed) {
  wm::Planar latents(channels, frames, height, width);
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : latents.data) v = normal(rng);
  return latents;
}

void write_latents(const std::string& path, const wm::Planar& latents) {
  wm::io::TensorEntry e;
  e.name = "latent";
  e.dtype = "F32";
  e.shape = {latents.channels, latents.frames, latents.height, latents.width};
  e.data = latents.data.data();
  e.bytes = latents.data.size() * sizeof(float);
  // decode_latents takes its frame rate from "fps" (else 16); "frames" would trim the output.
  wm::io::write_safetensors(path, {e}, {{"fps", "16"}, {"source", "wmbench vae-job"}});
}

std::string job_yaml(const Options& o, const wm::Device& device, const std::string& input,
                     const std::string& output) {
  std::string y = "job: vae-job\ntask: decode_latents\n";
  y += "input: " + input + "\noutput: " + output + "\non_exists: overwrite\n";
  y += "model: {kind: " + o.kind + ", weights: weights.safetensors" +
       (o.kind == "wan2.1-vae" ? ", dim: " + std::to_string(o.dim) : "") +
       (o.tuning.empty() ? "" : ", tuning: '" + o.tuning + "'") + "}\n";
  y += "precision: " + o.dtype + "\n";
  y += "devices: " +
       (device.kind == wm::Device::Kind::kCpu ? "cpu" : "[" + std::to_string(device.index) + "]") +
       "\n";
  y += "slice_frames: " + std::to_string(o.slice_frames) + "\n";
  y += "tokens: " + std::to_string(o.tokens) + "\n";
  if (o.pinned_mib > 0) y += "offload: {pinned_mib: " + std::to_string(o.pinned_mib) + "}\n";
  y += "encode: {codec: libx264, crf: " + std::to_string(o.crf) + ", preset: " + o.preset +
       ", pix_fmt: yuv420p, threads: " + std::to_string(o.encode_threads) + ", options: {";
  // "k=v,k2=v2" → k: 'v', k2: 'v2' (values single-quoted: x264-params holds ':' and '=').
  std::string sep;
  for (size_t at = 0; at < o.encode_options.size();) {
    size_t end = o.encode_options.find(',', at);
    if (end == std::string::npos) end = o.encode_options.size();
    const std::string item = o.encode_options.substr(at, end - at);
    const size_t eq = item.find('=');
    y += sep + item.substr(0, eq) + ": '" + (eq == std::string::npos ? "" : item.substr(eq + 1)) +
         "'";
    sep = ", ";
    at = end + 1;
  }
  y += "}}\n";
  return y;
}

void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  const bool written = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if ((f && std::fclose(f) != 0) || !written) {
    throw wm::OutputError(path + ": cannot write the job file", wm::kExitCantCreat);
  }
}

struct Phase {
  double seconds = 0;  // mean over the timed runs
  double best_seconds = 1e300;
  int64_t frames = 0;
  double peak_gpu_mib = -1;
  double peak_rss_mib = 0;
};

// Decode only on one session: each sequence of `warmups` untimed, then `iters` timed runs over
// `slices_of()` (made outside the timed region). Peaks cover the timed runs.
template <typename Slices>
Phase decode_only(wm::ModelSession& session, const wm::Device& device, Slices slices_of,
                  std::vector<std::vector<wm::Planar>> warmups, int iters, int64_t frames_want) {
  for (auto& w : warmups) wm::bench::run_slices(device, session, std::move(w));
  Phase phase;
  wm::models::reset_peak_device_memory(device);
  wm::bench::reset_peak_rss();
  double total = 0;
  for (int it = 0; it < iters; ++it) {
    std::vector<wm::Planar> slices = slices_of();
    const auto start = Clock::now();
    const int64_t frames = wm::bench::run_slices(device, session, std::move(slices));
    const double s = seconds_since(start);
    if (frames != frames_want) {
      throw wm::ModelError("bench: decoded " + std::to_string(frames) + " frames, expected " +
                           std::to_string(frames_want));
    }
    phase.frames = frames;
    total += s;
    phase.best_seconds = std::min(phase.best_seconds, s);
  }
  phase.seconds = total / iters;
  phase.peak_gpu_mib = wm::models::peak_device_memory_mib(device);
  phase.peak_rss_mib = wm::bench::peak_rss_mib();
  return phase;
}

struct JobPhase : Phase {
  double input_seconds = 0;  // mean of the inputs' processing (run_job's per-input times)
  std::map<std::string, double> metrics;  // of the last timed run, mean over its inputs
};

// Runs the job file `untimed + timed` times through run_job_files (the wmbatch CLI's entry); the
// last `timed` runs are measured. Throws wm::Error with the job's one-line error when a run fails.
JobPhase run_job(const std::string& yaml, const wm::Device& device, int untimed, int timed) {
  JobPhase phase;
  wm::sched::RunOptions options;
  options.progress = wm::sched::ProgressStyle::kNone;
  double total = 0, input_total = 0;
  for (int it = 0; it < untimed + timed; ++it) {
    const bool measured = it >= untimed;
    if (it == untimed) {
      wm::models::reset_peak_device_memory(device);
      wm::bench::reset_peak_rss();
    }
    std::vector<wm::sched::JobOutcome> outcomes;
    const auto start = Clock::now();
    const int rc = wm::sched::run_job_files({yaml}, options, &outcomes);
    const double s = seconds_since(start);
    if (rc != 0) {
      std::string error = "job failed";
      for (const auto& o : outcomes) {
        for (const auto& in : o.inputs) {
          if (!in.error.empty()) error = in.error;
        }
      }
      throw wm::Error(error, rc);
    }
    if (!measured) continue;
    total += s;
    for (const wm::sched::InputOutcome& in : outcomes.at(0).inputs) input_total += in.seconds;
    phase.best_seconds = std::min(phase.best_seconds, s);
    phase.frames = outcomes.at(0).frames;
    // Per-input metrics, the mean over the inputs (a batch's inputs overlap one another).
    phase.metrics.clear();
    const auto& inputs = outcomes.at(0).inputs;
    for (const wm::sched::InputOutcome& in : inputs) {
      for (const auto& [name, value] : in.metrics) phase.metrics[name] += value / inputs.size();
    }
  }
  phase.seconds = total / timed;
  phase.input_seconds = input_total / timed;
  phase.peak_gpu_mib = wm::models::peak_device_memory_mib(device);
  phase.peak_rss_mib = wm::bench::peak_rss_mib();
  return phase;
}

void put_memory(Json& j, const Phase& p) {
  if (p.peak_gpu_mib >= 0) j["peak_gpu_gib"] = p.peak_gpu_mib / 1024.0;
  j["peak_rss_mib"] = p.peak_rss_mib;
}

Json job_json(const JobPhase& job) {
  Json j;
  j["seconds"] = job.seconds;
  j["best_seconds"] = job.best_seconds;
  j["fps"] = double(job.frames) / job.seconds;
  j["input_seconds"] = job.input_seconds;
  j["input_fps"] = double(job.frames) / job.input_seconds;
  Json stages;
  for (const auto& [name, value] : job.metrics) {
    // "stage_model_seconds" → "model", "writer_finish_seconds" → "writer_finish".
    const std::string suffix = "_seconds";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::string key = name.substr(0, name.size() - suffix.size());
    if (key.rfind("stage_", 0) == 0) key = key.substr(6);
    stages[key] = value;
  }
  j["stage_seconds"] = stages;
  const auto model = job.metrics.find("stage_model_seconds");
  if (model != job.metrics.end() && model->second > 0) {
    j["model_stage_fps"] = double(job.frames) / model->second;
  }
  put_memory(j, job);
  return j;
}

// Removes the work folder unless the user asked to keep it.
struct WorkDir {
  std::string path;
  bool keep = false;
  ~WorkDir() {
    std::error_code ec;
    if (!keep && !path.empty()) fs::remove_all(path, ec);
  }
};

}  // namespace

int bench_vae_job(int argc, char** argv) {
  Options o;
  wm::Device device;
  if (const int status = parse(argc, argv, o, device); status >= 0) return status;

  WorkDir work;
  try {
    if (!o.keep.empty()) {
      fs::create_directories(o.keep);
      work.path = fs::absolute(o.keep).string();
      work.keep = true;
    } else {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/wmbench-vae-job-XXXXXX";
      if (!::mkdtemp(pattern.data())) {
        throw wm::OutputError(pattern + ": cannot create a temporary folder", wm::kExitCantCreat);
      }
      work.path = pattern;
    }
    wm::models::set_cpu_threads(o.threads);

    wm::ModelConfig config;
    config.kind = o.kind;
    config.task = "decode";
    wm::edit_options<wm::models::Wan21VaeOptions>(config).dim = o.dim;
    config.precision = wm::bench::parse_precision(o.dtype);
    config.pinned_pool_bytes = int64_t(o.pinned_mib) << 20;
    config.tuning = o.tuning;
    config.weights = work.path + "/weights.safetensors";
    const int latent_h = o.height / 8, latent_w = o.width / 8;
    // The slice length decode_latents uses (scheduler/task_latents.cpp).
    const int slice =
        wm::make_slice_rule(
            wm::auto_decode_slice_frames(o.slice_frames, o.kind, o.device.rfind("cuda", 0) == 0), 1,
            0)
            .slice_frames;

    const bool rss_per_phase = wm::bench::reset_peak_rss();  // false: peaks are the process's
    auto setup_start = Clock::now();
    write_random_weights(config.weights, config, o.weights_dtype == "bf16", o.seed);
    const wm::Planar latents =
        random_latents(wm::options_as<wm::models::Wan21VaeOptions>(config).z_dim, o.latent_frames,
                       latent_h, latent_w, o.seed);
    write_latents(work.path + "/latents.safetensors", latents);
    const std::string yaml = work.path + "/job.yaml";
    write_text(yaml, job_yaml(o, device, "latents.safetensors", "out.mp4"));
    const double setup_seconds = seconds_since(setup_start);

    // 1. Decode only (the model is gone before the job runs, so the job's peak is its own).
    Phase decode;
    int64_t frames_want = 0;
    {
      auto model = wm::make_model(config, device);
      // make_model raises LibTorch's CPU threads to the core count once per process; --threads
      // applies after it, for both paths.
      wm::models::set_cpu_threads(o.threads);
      auto session = model->open_session(device);
      // Process-wide from here on: the job's model gets the same cap.
      wm::parallel::limit_device_memory(device, o.max_gpu_gib);
      frames_want = model->output_frames(o.latent_frames);
      std::vector<std::vector<wm::Planar>> warmups;
      for (int i = 0; i < o.warmup; ++i) warmups.push_back(wm::bench::make_slices(latents, slice));
      decode = decode_only(
          *session, device, [&] { return wm::bench::make_slices(latents, slice); },
          std::move(warmups), o.iters, frames_want);
    }

    // 2. The job, through the CLI's entry.
    const JobPhase job = run_job(yaml, device, o.job_warmup, o.iters);

    // 3. What the job wrote.
    const std::string out_path = work.path + "/out.mp4";
    int64_t probed = 0;
    int probed_w = 0, probed_h = 0;
    {
      wm::io::VideoReader reader(out_path);
      probed_w = reader.info().width;
      probed_h = reader.info().height;
      wm::io::VideoFrame frame;
      while (reader.read(frame)) ++probed;
    }

    Json out;
    out["bench"] = "vae-job";
    if (o.max_gpu_gib > 0) out["max_gpu_gib"] = o.max_gpu_gib;
    if (o.pinned_mib > 0) out["pinned_mib"] = o.pinned_mib;
    std::string args;
    for (int i = 0; i < argc; ++i) args += (i ? " " : "") + std::string(argv[i]);
    out["args"] = "wmbench " + args;
    out["kind"] = o.kind;
    if (o.kind == "wan2.1-vae") out["dim"] = o.dim;
    out["dtype"] = o.dtype;
    out["weights_dtype"] = o.weights_dtype;
    out["device"] = device.str();
    out["out_width"] = o.width;
    out["out_height"] = o.height;
    out["latent_frames"] = o.latent_frames;
    out["slice_frames"] = slice;
    out["tokens"] = o.tokens;
    out["preset"] = o.preset;
    out["crf"] = o.crf;
    out["encode_threads"] = o.encode_threads;
    out["encode_options"] = o.encode_options;
    out["warmup"] = o.warmup;
    out["job_warmup"] = o.job_warmup;
    out["iters"] = o.iters;
    out["cpu_threads"] = wm::models::cpu_threads();
    out["cores"] = int(std::thread::hardware_concurrency());
    out["tuning"] = o.kind == "wan2.1-vae" ? wm::models::wan21_tuning(o.tuning) : o.tuning;
    out["frames"] = frames_want;
    out["setup_seconds"] = setup_seconds;
    out["decode_only_seconds"] = decode.seconds;
    out["decode_only_best_seconds"] = decode.best_seconds;
    out["decode_only_fps"] = double(frames_want) / decode.seconds;
    out["job_seconds"] = job.seconds;
    out["job_fps"] = double(job.frames) / job.seconds;
    out["ratio"] = (double(job.frames) / job.seconds) / (double(frames_want) / decode.seconds);
    out["ratio_input"] =
        (double(job.frames) / job.input_seconds) / (double(frames_want) / decode.seconds);
    out["fps_ratio_target"] = 0.85;
    Json dj;
    put_memory(dj, decode);
    out["decode_only"] = dj;
    out["job"] = job_json(job);
    out["rss_per_phase"] = rss_per_phase;
    Json oj;
    oj["bytes"] = int64_t(fs::file_size(out_path));
    oj["frames_probed"] = probed;
    oj["frames_written"] = job.frames;
    oj["width"] = probed_w;
    oj["height"] = probed_h;
    if (work.keep) oj["path"] = out_path;
    out["output"] = oj;

    // 4. The long sequence: decode only (and optionally the job) on N latent frames.
    if (o.latent_frames_long > 0) {
      const wm::Planar long_latents =
          random_latents(wm::options_as<wm::models::Wan21VaeOptions>(config).z_dim,
                         o.latent_frames_long, latent_h, latent_w, o.seed + 1);
      Phase long_decode;
      int64_t long_frames = 0;
      {
        auto model = wm::make_model(config, device);
        auto session = model->open_session(device);
        long_frames = model->output_frames(o.latent_frames_long);
        // Warm-up: a first slice, then one later slice of each other length (the shapes cuDNN
        // autotunes), not the whole long sequence.
        std::vector<wm::Planar> all = wm::bench::make_slices(long_latents, slice);
        std::vector<wm::Planar> warm;
        std::vector<int> seen;
        for (size_t i = 0; i < all.size(); ++i) {
          if (i == 0 || std::find(seen.begin(), seen.end(), all[i].frames) == seen.end()) {
            if (i > 0) seen.push_back(all[i].frames);
            warm.push_back(std::move(all[i]));
          }
        }
        std::vector<std::vector<wm::Planar>> warmups;
        warmups.push_back(std::move(warm));
        long_decode = decode_only(
            *session, device, [&] { return wm::bench::make_slices(long_latents, slice); },
            std::move(warmups), 1, long_frames);
      }
      Json lj;
      lj["latent_frames"] = o.latent_frames_long;
      lj["frames"] = long_frames;
      lj["decode_only_seconds"] = long_decode.seconds;
      lj["decode_only_fps"] = double(long_frames) / long_decode.seconds;
      put_memory(lj, long_decode);
      if (decode.peak_gpu_mib > 0 && long_decode.peak_gpu_mib > 0) {
        lj["peak_gpu_growth"] = long_decode.peak_gpu_mib / decode.peak_gpu_mib;
      }
      if (o.long_job) {
        write_latents(work.path + "/latents_long.safetensors", long_latents);
        const std::string long_yaml = work.path + "/job_long.yaml";
        write_text(long_yaml, job_yaml(o, device, "latents_long.safetensors", "out_long.mp4"));
        const JobPhase long_job = run_job(long_yaml, device, 0, 1);
        lj["job"] = job_json(long_job);
        if (job.peak_gpu_mib > 0 && long_job.peak_gpu_mib > 0) {
          lj["job_peak_gpu_growth"] = long_job.peak_gpu_mib / job.peak_gpu_mib;
        }
      }
      lj["peak_gpu_growth_target"] = 1.10;
      out["long"] = lj;
    }

    // 5. A batch: one job over N copies of the latents.
    if (o.batch > 0) {
      std::string inputs = "[";
      for (int i = 0; i < o.batch; ++i) {
        const std::string name = "batch_" + std::to_string(i) + ".safetensors";
        write_latents(work.path + "/" + name, latents);
        inputs += (i ? ", " : "") + name;
      }
      const std::string batch_yaml = work.path + "/job_batch.yaml";
      write_text(batch_yaml, job_yaml(o, device, inputs + "]", "batch/{stem}.mp4"));
      const JobPhase batch = run_job(batch_yaml, device, 0, o.iters);
      Json bj = job_json(batch);
      bj["inputs"] = o.batch;
      bj["frames"] = batch.frames;
      bj["ratio"] = (double(batch.frames) / batch.seconds) / (double(frames_want) / decode.seconds);
      out["batch"] = bj;
      if (batch.frames != frames_want * o.batch) {
        std::cerr << "wmbench vae-job: the batch wrote " << batch.frames << " frames, expected "
                  << frames_want * o.batch << "\n";
        return wm::kExitSoftware;
      }
    }

    std::cout << wm::json_dump(out) << std::endl;
    if (probed != frames_want || job.frames != frames_want) {
      std::cerr << "wmbench vae-job: " << out_path << " has " << probed << " frames (job wrote "
                << job.frames << "), expected " << frames_want << "\n";
      return wm::kExitSoftware;
    }
    return 0;
  } catch (const wm::Error& e) {
    std::cerr << "wmbench vae-job: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "wmbench vae-job: " << e.what() << "\n";
    return wm::kExitSoftware;
  }
}
