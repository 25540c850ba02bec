// wmbench seedvr2: times the SeedVR2 VAE (random weights, the full official architecture unless
// --channels says otherwise; no file needed) decoding random latents or encoding random video,
// and prints one JSON object.
//
//   wmbench seedvr2 decode|encode [--frames N] [--height H] [--width W]
//                   [--dtype fp32|bf16|fp16] [--device cpu|cuda:N] [--warmup N] [--iters N]
//                   [--slice-frames S] [--threads N] [--seed N] [--max-gpu-gib N]
//                   [--channels 128,256,512,512] [--norm-groups 32] [--compare-fp32 0|1]
//                   [--tuning KEY=V,...] [--devices 0,1|cpu] [--ranks N] [--scaling 0|1]
//                   [--nccl 0|1] [--whole-slices 0|1] [--trace PREFIX]
//
// --devices/--ranks add "sequence_parallel": the same run as ranks that split each slice in time
// over the listed devices (several ranks on one device run on streams of their own), its fps and
// speed-up against the one-device run, per rank its busy, idle and compute seconds and exchange,
// and the scaling model's speed-up on devices of their own (docs/gpu.md, "The scaling model").
// --whole-slices 1 gives each slice whole to one rank in turn instead (still a ring).
// --trace PREFIX runs the split once more under the profiler and writes its Chrome trace to
// PREFIX-time.json (as wmbench vae-decode does; tools/gpu-checks/trace_summary.py reads it).
//
// H and W are video pixels (multiples of 8); --frames counts video frames (1 + 4k; default 81,
// i.e. 21 latent frames). --slice-frames S cuts the input as the job runner does: decode S latent
// frames per slice (0: one slice; the official pipeline decodes 1 + 1, then 1 at a time), encode
// 1 + S frames then S per slice (S a multiple of 4; 0: one slice). Timing covers the model only:
// host planar in to host planar out (which synchronises the device), model construction excluded.
// "tflops" counts the convolutions' and the attention's multiply-adds (2 FLOP each) of the whole
// sequence. --compare-fp32 1 runs the same input through float32 weights afterwards and reports
// the timed run's PSNR against it (decode: on the [-1, 1] range) and its largest difference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/memory_budget.h"
#include "src/base/error.h"
#include "src/exec/search_gate.h"
#include "src/model.h"
#include "src/models/bench_support.h"
#include "src/models/seedvr2/seedvr2_layout.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "tools/bench.h"
#include "tools/bench_vae_common.h"

namespace {

namespace seedvr2 = wm::models::seedvr2;

struct Options {
  std::string op;
  int dim = 0;  // (shared flag; unused)
  int latent_frames = 0;
  int frames = 81;
  int height = 480;
  int width = 832;
  std::string dtype = "bf16";
  std::string device = "cpu";
  int warmup = 1;
  int iters = 2;
  int slice_frames = 0;
  int threads = 0;
  uint64_t seed = 1;
  std::string tuning;
  int max_gpu_gib = 0;
  int pinned_mib = 0;
  std::vector<int64_t> channels = {128, 256, 512, 512};
  int norm_groups = 32;
  bool compare_fp32 = false;
  // Sequence parallelism (a time split): ranks over these devices, measured after the
  // one-device run, against it (wm::bench::run_parallel).
  std::string devices;
  int ranks = 0;              // 0: one per listed device
  bool whole_slices = false;  // each slice whole to one rank in turn (else a run of each)
  bool scaling = true;
  bool nccl = false;  // the NCCL exchange (a GPU per rank)
  std::string trace;  // Chrome trace file prefix of one more run of the split (empty: none)
};

const char* kAbout =
    "  decode|encode first. The SeedVR2 VAE (random weights) decoding random latents or encoding\n"
    "  random video; H and W are video pixels (multiples of 8), --frames video frames (1 + 4k).\n"
    "  --devices/--ranks: the same run as sequence-parallel ranks, against the one-device run.\n";

// Fills `o` and `device` (argv[1] is decode or encode). Returns -1 when the benchmark should run,
// else the exit status (the usage or the one-line error printed).
int parse(int argc, char** argv, Options& o, wm::Device& device) {
  wm::bench::Args args("wmbench seedvr2 decode|encode", kAbout);
  args.integer("--frames", &o.frames, 1, "N");
  wm::bench::add_shared_flags(args, o);
  args.custom("--channels", "A,B,C,D",
              [&](const std::string& v) {
                o.channels.clear();
                std::stringstream in(v);
                for (std::string item; std::getline(in, item, ',');) {
                  o.channels.push_back(wm::bench::parse_int("--channels", item, 1));
                }
                if (o.channels.size() != 4) {
                  throw std::invalid_argument("--channels: expected 4 widths");
                }
              })
      .integer("--norm-groups", &o.norm_groups, 1, "G")
      .boolean("--compare-fp32", &o.compare_fp32)
      .text("--devices", &o.devices, "0,1|cpu")
      .integer("--ranks", &o.ranks, 1, "N")
      .boolean("--whole-slices", &o.whole_slices)
      .boolean("--scaling", &o.scaling)
      .boolean("--nccl", &o.nccl)
      .text("--trace", &o.trace, "PREFIX")
      .hide({"--dim", "--latent-frames", "--pinned-mib"});  // shared, unused here
  if (args.help(argc, argv)) return 0;
  o.op = argc > 1 ? argv[1] : "";
  if (o.op != "decode" && o.op != "encode") {
    return args.fail(o.op.empty() ? "decode or encode?"
                                  : "expected decode or encode, got '" + o.op + "'");
  }
  if (const int status = args.parse(argc, argv, 2); status >= 0) return status;
  if (o.height % 8 != 0 || o.width % 8 != 0) {
    return args.fail("--height and --width must be multiples of 8");
  }
  if ((o.frames - 1) % 4 != 0) return args.fail("--frames must be 1 + 4k");
  if (o.op == "encode" && o.slice_frames % 4 != 0) {
    return args.fail("--slice-frames must be a multiple of 4 for encode");
  }
  device = wm::bench::parse_device(o.device);  // checked by --device
  return -1;
}

// Multiply-adds ×2 of the whole sequence (all slices together: the frame counts per layer add
// up to the whole-sequence ones). Convs: out elements × in channels × kernel volume; attention:
// 4 projections plus scores and weighted sum per frame.
struct FlopCounter {
  const seedvr2::Architecture& a;
  double flops = 0;
  void conv(int64_t cin, int64_t cout, int64_t k, int64_t t, int64_t h, int64_t w) {
    flops += 2.0 * double(cout) * double(t * h * w) * double(cin) * double(k);
  }
  void resnet(int64_t cin, int64_t cout, int64_t t, int64_t h, int64_t w) {
    conv(cin, cout, 27, t, h, w);
    conv(cout, cout, 27, t, h, w);
    if (cin != cout) conv(cin, cout, 1, t, h, w);
  }
  void mid(int64_t c, int64_t t, int64_t h, int64_t w) {
    resnet(c, c, t, h, w);
    resnet(c, c, t, h, w);
    const double n = double(h * w);
    flops += double(t) * (4 * 2.0 * n * double(c * c) + 2 * 2.0 * n * n * double(c));
  }
};

double sequence_flops(const seedvr2::Architecture& a, bool decode, int64_t frames, int64_t h,
                      int64_t w) {
  FlopCounter f{a};
  const int n = a.levels();
  const std::vector<int64_t>& c = a.channels;
  if (decode) {
    int64_t t = (frames - 1) / 4 + 1;
    h /= 8, w /= 8;
    f.conv(a.latent_channels, c[n - 1], 27, t, h, w);
    f.mid(c[n - 1], t, h, w);
    int64_t prev = c[n - 1];
    for (int i = 0; i < n; ++i) {
      const int64_t width = c[size_t(n - 1 - i)];
      for (int j = 0; j <= a.layers_per_block; ++j) f.resnet(j ? width : prev, width, t, h, w);
      if (i < n - 1) {
        const int64_t z = a.up_temporal(i) ? 2 : 1;
        f.conv(width, width * 4 * z, 1, t, h, w);
        t = z == 2 ? 2 * t - 1 : t;
        h *= 2, w *= 2;
        f.conv(width, width, 27, t, h, w);
      }
      prev = width;
    }
    f.conv(c[0], a.in_channels, 27, t, h, w);
  } else {
    int64_t t = frames;
    f.conv(a.in_channels, c[0], 27, t, h, w);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < a.layers_per_block; ++j) {
        f.resnet(j ? c[size_t(i)] : (i ? c[size_t(i) - 1] : c[0]), c[size_t(i)], t, h, w);
      }
      if (i < n - 1) {
        const bool temporal = a.down_temporal(i);
        h /= 2, w /= 2;
        t = temporal ? (t - 1) / 2 + 1 : t;
        f.conv(c[size_t(i)], c[size_t(i)], temporal ? 27 : 9, t, h, w);
      }
    }
    f.mid(c[n - 1], t, h, w);
    f.conv(c[n - 1], 2 * int64_t(a.latent_channels), 27, t, h, w);
  }
  return f.flops;
}

// `input` cut as the job runner cuts it.
std::vector<wm::Planar> slices_of(const wm::Planar& input, bool decode, int slice) {
  if (decode) return wm::bench::make_slices(input, slice > 0 ? slice : input.frames);
  std::vector<wm::Planar> out;
  const int first = slice > 0 ? std::min(1 + slice, input.frames) : input.frames;
  for (int t0 = 0; t0 < input.frames;) {
    const int n = t0 == 0 ? first : std::min(slice, input.frames - t0);
    wm::Planar p(input.channels, n, input.height, input.width);
    for (int c = 0; c < input.channels; ++c) {
      for (int t = 0; t < n; ++t) {
        std::copy_n(input.plane(c, t0 + t), input.plane_size(), p.plane(c, t));
      }
    }
    out.push_back(std::move(p));
    t0 += n;
  }
  return out;
}

// The slices' outputs as one planar along time.
wm::Planar joined(std::vector<wm::Planar>& parts) {
  int frames = 0;
  for (const wm::Planar& p : parts) frames += p.frames;
  wm::Planar out(parts.front().channels, frames, parts.front().height, parts.front().width);
  int t0 = 0;
  for (const wm::Planar& p : parts) {
    for (int c = 0; c < p.channels; ++c) {
      for (int t = 0; t < p.frames; ++t) {
        std::copy_n(p.plane(c, t), p.plane_size(), out.plane(c, t0 + t));
      }
    }
    t0 += p.frames;
  }
  return out;
}

}  // namespace

int bench_seedvr2(int argc, char** argv) {
  Options o;
  wm::Device device;
  if (const int status = parse(argc, argv, o, device); status >= 0) return status;

  try {
    const bool decode = o.op == "decode";
    wm::models::set_cpu_threads(o.threads);
    seedvr2::Architecture arch;
    arch.channels = o.channels;
    arch.norm_groups = o.norm_groups;
    wm::ModelConfig config;
    config.kind = "seedvr2-vae";
    config.task = decode ? "decode" : "encode";
    config.precision = wm::bench::parse_precision(o.dtype);
    config.tuning = o.tuning;
    auto model = wm::models::make_seedvr2_vae_random(config, arch, device, o.seed);
    auto session = model->open_session(device);
    wm::parallel::limit_device_memory(device, o.max_gpu_gib);

    const wm::ModelTraits& traits = model->traits();
    const int in_frames = decode ? (o.frames - 1) / 4 + 1 : o.frames;
    const int in_h = decode ? o.height / 8 : o.height, in_w = decode ? o.width / 8 : o.width;
    wm::Planar input(traits.in_channels, in_frames, in_h, in_w);
    std::mt19937 rng(uint32_t(o.seed));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (float& v : input.data) v = decode ? normal(rng) : uniform(rng);

    const int64_t frames_out = model->output_frames(in_frames);
    double total = 0, best = 1e300, warm = 0;
    int64_t shapes_before = 0;
    std::vector<wm::Planar> last;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      std::vector<wm::Planar> slices = slices_of(input, decode, o.slice_frames);
      if (it == o.warmup) {
        wm::models::reset_peak_device_memory(device);
        shapes_before = wm::exec::search_gate_alone_passes();
      }
      const auto start = std::chrono::steady_clock::now();
      std::vector<wm::Planar> outs;
      const int64_t frames = wm::bench::run_slices(device, *session, std::move(slices), &outs);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (frames != frames_out) {
        throw wm::ModelError("bench: got " + std::to_string(frames) + " frames, expected " +
                             std::to_string(frames_out));
      }
      if (it >= o.warmup) {
        total += seconds;
        best = std::min(best, seconds);
      } else {
        warm += seconds;
      }
      if (o.compare_fp32 && it + 1 == o.warmup + o.iters) last = std::move(outs);
    }
    const double seconds = total / o.iters;
    const double flops = sequence_flops(arch, decode, o.frames, o.height, o.width);

    nlohmann::ordered_json out;
    out["bench"] = "seedvr2";
    out["op"] = o.op;
    out["architecture"] = arch.str();
    out["dtype"] = o.dtype;
    out["device"] = device.str();
    out["width"] = o.width;
    out["height"] = o.height;
    out["frames"] = o.frames;
    out["latent_frames"] = (o.frames - 1) / 4 + 1;
    out["slice_frames"] = o.slice_frames;
    out["tuning"] = o.tuning;
    out["warmup_seconds"] = warm;  // the untimed runs: on CUDA mostly cuDNN's search
    // Convolution shapes first run on their thread in the timed runs (each a cuDNN search when it
    // is on): 0 when the warm-up took them all.
    out["timed_new_shapes"] = wm::exec::search_gate_alone_passes() - shapes_before;
    out["iters"] = o.iters;
    out["seconds"] = seconds;
    out["best_seconds"] = best;
    out["fps"] = double(o.frames) / seconds;
    out["tflops"] = flops / seconds / 1e12;
    out["tflop_per_sequence"] = flops / 1e12;
    out["cpu_threads"] = wm::models::cpu_threads();
    out["peak_rss_mib"] = wm::bench::peak_rss_mib();
    if (o.max_gpu_gib > 0) out["max_gpu_gib"] = o.max_gpu_gib;
    if (device.kind == wm::Device::Kind::kCuda) {
      const double peak = wm::models::peak_device_memory_mib(device);
      out["peak_gpu_gib"] = peak / 1024.0;
    }
    if (o.ranks > 1 || !o.devices.empty()) {
      // The one-device session's causal state (10 GB at 1080p in 16 GiB) would stay on the
      // device through the ranks' runs, and they plan their memory around it.
      session.reset();
      wm::bench::ParallelBench b;
      b.devices = wm::bench::parse_devices(o.devices, device);
      b.ranks = o.ranks > 0 ? o.ranks : int(b.devices.size());
      b.warmup = o.warmup;
      b.iters = o.iters;
      b.scaling = o.scaling;
      b.nccl = o.nccl;
      b.whole_slices = o.whole_slices;
      if (!o.trace.empty()) b.trace = o.trace + "-time.json";
      b.model = [&](const wm::Device& d) -> std::shared_ptr<const wm::Model> {
        return wm::models::make_seedvr2_vae_random(config, arch, d, o.seed);
      };
      b.slices = [&] { return slices_of(input, decode, o.slice_frames); };
      b.frames_out = frames_out;
      b.one_seconds = seconds;
      out["sequence_parallel"] = wm::bench::run_parallel(b);
    }
    if (o.compare_fp32 && config.precision != wm::Precision::kFloat32) {
      config.precision = wm::Precision::kFloat32;
      auto ref_model = wm::models::make_seedvr2_vae_random(config, arch, device, o.seed);
      auto ref_session = ref_model->open_session(device);
      std::vector<wm::Planar> ref_outs;
      wm::bench::run_slices(device, *ref_session, slices_of(input, decode, o.slice_frames),
                            &ref_outs);
      const wm::Planar a = joined(last), b = joined(ref_outs);
      double mse = 0, worst = 0, peak = 0;
      for (size_t i = 0; i < a.data.size(); ++i) {
        // Decode output as the pipeline writes it: clipped to [-1, 1].
        const double x = decode ? std::clamp(double(a.data[i]), -1.0, 1.0) : a.data[i];
        const double y = decode ? std::clamp(double(b.data[i]), -1.0, 1.0) : b.data[i];
        mse += (x - y) * (x - y);
        worst = std::max(worst, std::fabs(x - y));
        peak = std::max(peak, std::fabs(y));
      }
      mse /= double(std::max<size_t>(a.data.size(), 1));
      const double range = decode ? 2.0 : 2.0 * peak;
      out["psnr_vs_fp32_db"] = 10.0 * std::log10(range * range / std::max(mse, 1e-30));
      out["max_abs_diff_vs_fp32"] = worst;
    }
    std::cout << out.dump() << std::endl;
    return 0;
  } catch (const wm::Error& e) {
    std::cerr << "wmbench seedvr2: " << e.what() << "\n";
    return e.exit_code();
  }
}
