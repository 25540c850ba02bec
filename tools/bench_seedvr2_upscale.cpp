// wmbench seedvr2-upscale: the whole SeedVR2 one-step upscale of one temporal batch with random
// weights of the official shapes (no file needed) — resize, VAE encode, DiT, VAE decode, colour
// fix — timed per stage, each synchronised; prints one JSON object.
//
//   wmbench seedvr2-upscale [--model 3b|7b|tiny] [--frames N] [--height H] [--width W]
//                           [--dtype bf16|fp16|fp32] [--device cuda:N|cpu] [--warmup N]
//                           [--iters N] [--max-gpu-gib N] [--text-tokens N] [--threads N]
//                           [--seed N] [--color-fix wavelet|adain|none] [--tuning K=V,...]
//                           [--devices 0,1|cpu] [--ranks N] [--parallel sequence|data|both]
//
// --model tiny: the golden data's sizes (the benchmark's own check, on a CPU). H × W is the output
// size (default 720 × 1280); the input is a random clip of half that size
// brought to it by the official area rule, which also crops to multiples of 16 as the official
// script does (1080 × 1920 runs the networks at 1072 × 1920). --frames: one batch (1 + 4k; the
// issue's tables use 21 and 45). --max-gpu-gib caps the device's memory budget: the DiT's blocks
// that do not fit stream from pinned host memory. "fps" is output frames per second of the whole
// batch; "dit_fps" of the DiT alone. "dit_blocks_resident" says how many blocks stayed resident.
// --devices (with --ranks N: N ranks over them, round robin; default one per device) adds, after
// the one-device run, the same batch on several devices, each against one device's plain run
// (unsynchronised stages, as a job runs it) and its output: "sequence_parallel" splits the batch
// inside over the ranks (the VAE's latent frames around the ring, the DiT's windows), as a job's
// `parallel: {mode: sequence}` does; "data_parallel" gives every rank a batch of its own at once
// (a job's batches over its devices): seconds, fps (output frames of all ranks), speed-up, and
// the largest difference from one device's frames in 8-bit levels.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/memory_budget.h"
#include "parallel/rank_run.h"
#include "src/base/error.h"
#include "src/model.h"
#include "src/models/bench_support.h"
#include "src/models/seedvr2/seedvr2_upscale.h"
#include "tools/bench.h"
#include "tools/bench_vae_common.h"

namespace {

namespace seedvr2 = wm::models::seedvr2;

struct Options {
  std::string model = "3b";
  int frames = 21;
  int text_tokens = 58;  // pos_emb.pt
  std::string color_fix = "wavelet";
  // The flags the VAE benchmarks share (bench_vae_common.h); dim, latent_frames, slice_frames
  // and pinned_mib are read but not used; --tuning goes to the VAE (its execution choices).
  int dim = 0, latent_frames = 0, slice_frames = 0, pinned_mib = 0;
  int height = 720, width = 1280;
  std::string dtype = "bf16";
  std::string device = "cuda:0";
  int warmup = 1, iters = 2;
  int max_gpu_gib = 0;
  int threads = 0;
  uint64_t seed = 1;
  std::string tuning;
  std::string devices;  // several devices (empty: the one-device run only)
  int ranks = 0;        // over them (0: one per device)
  std::string parallel = "both";
};

const char* kAbout =
    "  The whole SeedVR2 upscale of one batch of --frames frames (input half of H x W), per\n"
    "  stage, with random weights (tiny: the golden data's sizes).\n";

// Fills `o` and `device`. Returns -1 when the benchmark should run, else the exit status (the
// usage or the one-line error printed).
int parse(int argc, char** argv, Options& o, wm::Device& device) {
  wm::bench::Args args("wmbench seedvr2-upscale", kAbout);
  args.choice("--model", &o.model, {"3b", "7b", "tiny"})
      .integer("--frames", &o.frames, 1, "N")
      .integer("--text-tokens", &o.text_tokens, 1, "N")
      .choice("--color-fix", &o.color_fix, {"wavelet", "adain", "none"})
      .text("--devices", &o.devices, "0,1|cpu")
      .integer("--ranks", &o.ranks, 0, "N")
      .choice("--parallel", &o.parallel, {"sequence", "data", "both"});
  wm::bench::add_shared_flags(args, o);
  args.hide({"--dim", "--latent-frames", "--slice-frames", "--pinned-mib"});  // unused
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  if ((o.frames - 1) % 4 != 0) return args.fail("--frames must be 1 + 4k");
  if (o.height % 2 != 0 || o.width % 2 != 0) {
    return args.fail("--height and --width must be even (the input is half of them)");
  }
  device = wm::bench::parse_device(o.device);  // checked by --device
  return -1;
}

// The largest difference between `parts` (in order, frames one after another) and `one`, in
// 8-bit levels; 1e9 when their sizes do not match.
double max_levels(const std::vector<const wm::Planar*>& parts, const wm::Planar& one) {
  const size_t plane = size_t(one.height) * size_t(one.width);
  double most = 0;
  int at = 0;
  for (const wm::Planar* part : parts) {
    const wm::Planar& p = *part;
    if (p.height != one.height || p.width != one.width || p.channels != one.channels ||
        at + p.frames > one.frames) {
      return 1e9;
    }
    for (int ch = 0; ch < one.channels; ++ch) {
      const float* a = p.data.data() + size_t(ch) * size_t(p.frames) * plane;
      const float* b = one.data.data() + (size_t(ch) * size_t(one.frames) + size_t(at)) * plane;
      for (size_t i = 0; i < size_t(p.frames) * plane; ++i) {
        most = std::max(most, double(std::abs(a[i] - b[i])) * 255.0);
      }
    }
    at += p.frames;
  }
  return at == one.frames ? most : 1e9;
}

// The batch on several devices (--devices): split inside over ranks (`split`) or one whole batch
// per rank, each rank on a device worker of its own (lane 1 and up: lane 0 ran the one-device
// run), timed over `iters` runs after `warmup`. Returns the ranks' outputs of the last run.
std::vector<wm::Planar> run_ranks(const std::vector<std::shared_ptr<const wm::Model>>& models,
                                  const std::vector<wm::Device>& devices, const wm::Planar& input,
                                  bool split, int warmup, int iters, double& seconds) {
  wm::parallel::InProcessRanks ranks(devices, int(models.size()), 1);
  std::vector<wm::Planar> out;
  seconds = 0;
  for (int it = 0; it < warmup + iters; ++it) {
    const auto start = std::chrono::steady_clock::now();
    out = ranks.run(split, [&](int r, wm::RunContext& ctx) {
      return wm::models::seedvr2_upscale_batch(*models[size_t(r)], input, ctx);
    });
    if (it >= warmup) {
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  seconds /= std::max(1, iters);
  return out;
}

}  // namespace

int bench_seedvr2_upscale(int argc, char** argv) {
  Options o;
  wm::Device device;
  if (const int status = parse(argc, argv, o, device); status >= 0) return status;
  try {
    wm::models::set_cpu_threads(o.threads);
    seedvr2::DitArchitecture dit = o.model == "7b" ? seedvr2::DitArchitecture::official_7b()
                                                   : seedvr2::DitArchitecture::official_3b();
    seedvr2::Architecture vae;  // the official VAE
    if (o.model == "tiny") {
      // The golden data's sizes (a check of the benchmark itself, on any machine).
      dit.dim = 64, dit.heads = 2, dit.head_dim = 32, dit.layers = 4, dit.mm_layers = 2;
      dit.mlp_hidden = 256, dit.rope_freqs = 5, dit.txt_in_dim = 32;
      vae.channels = {16, 32, 64, 64};
      vae.norm_groups = 4;
    }
    auto options = std::make_shared<wm::models::Seedvr2Options>();
    options->color_fix = o.color_fix == "adain"  ? wm::models::Seedvr2Options::ColorFix::kAdain
                         : o.color_fix == "none" ? wm::models::Seedvr2Options::ColorFix::kNone
                                                 : wm::models::Seedvr2Options::ColorFix::kWavelet;
    options->batch_frames = o.frames;
    options->batch_overlap = 0;
    wm::ModelConfig config;
    config.kind = "seedvr2";
    config.task = "upscale";
    config.precision = wm::bench::parse_precision(o.dtype);
    config.resolution = {o.height, o.width};  // the official area rule and crop
    config.options = options;
    config.tuning = o.tuning;  // the VAE's (seedvr2_blocks.h, Tuning)
    wm::parallel::limit_device_memory(device, o.max_gpu_gib);
    const auto build = std::chrono::steady_clock::now();
    auto model = wm::models::make_seedvr2_random(config, dit, vae, o.text_tokens, device, o.seed);
    const double build_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - build).count();

    wm::Planar input(3, o.frames, o.height / 2, o.width / 2);
    std::mt19937 rng(uint32_t(o.seed));
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    for (float& v : input.data) v = uniform(rng);

    wm::parallel::DeviceWorker& worker = wm::parallel::device_worker(device, 0);
    wm::models::Seedvr2StageSeconds sum;
    double best = 1e300;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      if (it == o.warmup) {
        wm::models::reset_peak_device_memory(device);
        wm::bench::reset_peak_rss();
      }
      const auto s = worker.call(
          [&] { return wm::models::seedvr2_time_batch(*model, input, worker.context()); });
      // Where device memory goes, stage by stage (also for the warm-up: a later batch that
      // runs out of memory shows what the first left behind).
      std::string memory;
      for (const auto& [stage, bytes] : s.allocated) {
        memory += " " + stage + " " + std::to_string(bytes >> 20);
      }
      if (!memory.empty()) {
        std::cerr << "seedvr2-upscale: batch " << it << " MiB allocated after:" << memory
                  << "; peak " << (s.peak_allocated >> 20) << "\n";
      }
      if (it < o.warmup) continue;
      sum.resize += s.resize, sum.encode += s.encode, sum.dit += s.dit, sum.decode += s.decode;
      sum.color_fix += s.color_fix, sum.total += s.total;
      best = std::min(best, s.total);
    }
    const double n = o.iters;
    nlohmann::ordered_json out;
    out["bench"] = "seedvr2-upscale";
    out["model"] = o.model;
    out["dit"] = dit.str();
    out["dtype"] = o.dtype;
    out["device"] = device.str();
    out["height"] = o.height;
    out["width"] = o.width;
    out["network_height"] = o.height - o.height % 16;
    out["network_width"] = o.width - o.width % 16;
    out["frames"] = o.frames;
    out["text_tokens"] = o.text_tokens;
    out["color_fix"] = o.color_fix;
    if (!o.tuning.empty()) out["tuning"] = o.tuning;
    out["iters"] = o.iters;
    out["build_seconds"] = build_seconds;
    out["resize_seconds"] = sum.resize / n;
    out["encode_seconds"] = sum.encode / n;
    out["dit_seconds"] = sum.dit / n;
    out["decode_seconds"] = sum.decode / n;
    out["color_fix_seconds"] = sum.color_fix / n;
    out["seconds"] = sum.total / n;
    out["best_seconds"] = best;
    out["fps"] = double(o.frames) / (sum.total / n);
    out["dit_fps"] = double(o.frames) / (sum.dit / n);
    out["peak_rss_mib"] = wm::bench::peak_rss_mib();
    if (o.max_gpu_gib > 0) out["max_gpu_gib"] = o.max_gpu_gib;
    if (device.kind == wm::Device::Kind::kCuda) {
      out["peak_gpu_gib"] = wm::models::peak_device_memory_mib(device) / 1024.0;
    }
    out["dit_blocks_resident"] = wm::models::seedvr2_resident_blocks(*model);
    out["dit_blocks"] = dit.layers;
    if (!o.devices.empty()) {
      const std::vector<wm::Device> devices = wm::bench::parse_devices(o.devices, device);
      const int ranks = o.ranks > 0 ? o.ranks : int(devices.size());
      // One device's plain run (as a job runs a batch: no per-stage synchronisation) and its
      // frames, warm: the baseline of both.
      std::shared_ptr<const wm::Model> shared = std::move(model);
      std::vector<std::shared_ptr<const wm::Model>> one_model{shared};
      double one_seconds = 0;
      const wm::Planar one =
          std::move(run_ranks(one_model, {device}, input, false, 1, o.iters, one_seconds)[0]);
      std::vector<std::shared_ptr<const wm::Model>> models;
      for (int r = 0; r < ranks; ++r) {
        const wm::Device& d = devices[size_t(r) % devices.size()];
        models.push_back(d.str() == device.str()
                             ? shared
                             : std::shared_ptr<const wm::Model>(wm::models::make_seedvr2_random(
                                   config, dit, vae, o.text_tokens, d, o.seed)));
      }
      std::string names;
      for (const wm::Device& d : devices) names += (names.empty() ? "" : ",") + d.str();
      out["one_device_seconds"] = one_seconds;
      for (const bool split : {true, false}) {
        if (o.parallel != "both" && (o.parallel == "sequence") != split) continue;
        double seconds = 0;
        const std::vector<wm::Planar> parts =
            run_ranks(models, devices, input, split, o.warmup, o.iters, seconds);
        nlohmann::ordered_json j;
        j["devices"] = names;
        j["ranks"] = ranks;
        j["seconds"] = seconds;
        const double batches = split ? 1.0 : double(ranks);
        j["fps"] = batches * double(o.frames) / seconds;
        j["speedup"] = batches * one_seconds / seconds;
        double diff = 0;
        std::vector<const wm::Planar*> each;
        for (const wm::Planar& p : parts) each.push_back(&p);
        if (split) {
          diff = max_levels(each, one);
        } else {
          for (const wm::Planar* p : each) diff = std::max(diff, max_levels({p}, one));
        }
        j["max_diff_levels"] = diff;
        out[split ? "sequence_parallel" : "data_parallel"] = j;
      }
    }
    std::cout << out.dump() << std::endl;
    return 0;
  } catch (const wm::Error& e) {
    std::cerr << "wmbench seedvr2-upscale: " << e.what() << "\n";
    return e.exit_code();
  }
}
