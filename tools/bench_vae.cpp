// wmbench vae-decode: times the Wan2.1 VAE decoder (random weights, no file needed) on random
// latents and prints one JSON object.
//
//   wmbench vae-decode [--dim 96|16] [--latent-frames T] [--height H] [--width W]
//                      [--dtype fp32|bf16|fp16] [--device cpu|cuda:N] [--warmup N] [--iters N]
//                      [--slice-frames S] [--threads N] [--seed N] [--profile 0|1]
//                      [--compare-fp32 0|1] [--tuning KEY=V,...] [--max-gpu-gib N]
//                      [--pinned-mib N] [--kernels 0|1] [--gpu-activity 0|1]
//                      [--devices 0,1|cpu] [--ranks N[,M...]] [--parallel sequence|spatial|...]
//                      [--scaling 0|1] [--nccl 0|1] [--pin-cpu 0|1] [--trace PREFIX]
//
// --devices/--ranks add "sequence_parallel": the same decode as sequence-parallel ranks over the
// listed devices (ranks: one per device, or N; several on one device run on streams of their
// own; a list N,M measures each, as "sequence_parallel_N", ...), its fps, speed-up against the
// one-device run of the same invocation, per rank its busy, idle and (--scaling 1, the default:
// one more decode with the ranks one after another) compute seconds, peak memory and exchange
// (bytes, messages, wait), and "scaling": the speed-up predicted on devices of their own over
// NVLink and PCIe 5 (docs/gpu.md, "The scaling model").
// --parallel picks the split: sequence (time, the default), spatial (bands of latent rows:
// "spatial_parallel"), whole (time, each slice whole to one rank in turn: "whole_parallel"), or
// several ("sequence,whole,spatial": one object each, measured one after the other against the
// same one-device run). --pin-cpu 0 leaves CPU ranks' threads unpinned (1, the default: each
// rank and its intra-op threads on cores of their own, SequenceParallelOptions::pin_cpu).
//
// H and W are output pixels (multiples of 8). --slice-frames S decodes the T latent frames as
// consecutive slices of S (0: one slice), exactly as the job runner would. Timing covers decode
// only: from the input planar on the host to the output planar on the host (which synchronises
// the device), excluding model construction.
//
// --profile 1 adds one more decode with per-stage timings (synchronised; not part of the timed
// runs). --compare-fp32 1 decodes the same latents with float32 weights afterwards and reports
// the PSNR of the timed run's output against it. --kernels 1 (CUDA) adds "kernels": the fused
// norm and residual passes' bandwidth on activations of this output size, per threads-per-pixel
// choice and for packed and cropped input. --tuning sets the model's tuning (execution
// choices of the Wan2.1 model, src/models/wan21/torch/wan21_blocks.h) for A/B measurements.
// tflops_ref counts the reference decoder's 8.5 MFLOP per output pixel. --gpu-activity 1 (CUDA,
// LibTorch 2) adds one more decode under LibTorch's Kineto profiler and reports what the GPU did
// ("gpu_activity": kernels, busy time, the idle gaps between kernels split at 20 µs: what CUDA
// graphs could win). --trace PREFIX (with --devices/--ranks) runs each split once more under the
// profiler and writes its Chrome trace to PREFIX-time.json / PREFIX-rows.json: per device its
// kernels and copies, per host thread its CUDA calls and how long each waited.
#include <cmath>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/memory_budget.h"
#include "parallel/sequence_parallel.h"
#include "src/base/error.h"
#include "src/exec/search_gate.h"
#include "src/model.h"
#include "src/models/bench_support.h"
#include "src/models/wan21/wan21_bench_support.h"
#include "src/models/wan21/wan21_vae.h"
#include "tools/bench.h"
#include "tools/bench_vae_common.h"

namespace {

struct Options {
  int dim = 96;
  int latent_frames = 5;
  int height = 256;
  int width = 256;
  std::string dtype = "fp32";
  std::string device = "cpu";
  int warmup = 1;
  int iters = 3;
  int slice_frames = 0;
  int threads = 0;
  uint64_t seed = 1;
  bool profile = false;
  bool compare_fp32 = false;
  bool kernels = false;
  bool gpu_activity = false;
  std::string tuning;
  int max_gpu_gib = 0;
  int pinned_mib = 0;  // the job's offload.pinned_mib (0: the default)
  // Sequence parallelism: ranks over these devices (empty: --device), measured after the
  // one-device run, against it.
  std::string devices;
  std::vector<int> ranks;  // rank counts to measure, one after another (empty: one per device)
  std::vector<std::string> parallel = {"sequence"};  // splits to measure: sequence, spatial
  bool scaling = true;  // the scaling model's per-rank compute (one more decode, ranks serial)
  bool pin_cpu = true;  // CPU ranks on cores of their own
  bool nccl = false;    // the NCCL exchange (a GPU per rank)
  std::string trace;    // Chrome trace file prefix of one more run per split (empty: none)
};

const char* kAbout =
    "  Wan2.1 VAE decode of random latents with random weights: fps and peak memory. --ranks:\n"
    "  rank counts to measure (N,M,...; default one per --devices entry), --parallel the splits.\n";

// Fills `o` and `device`. Returns -1 when the benchmark should run, else the exit status (the
// usage or the one-line error printed).
int parse(int argc, char** argv, Options& o, wm::Device& device) {
  wm::bench::Args args("wmbench vae-decode", kAbout);
  wm::bench::add_shared_flags(args, o);
  args.boolean("--profile", &o.profile)
      .boolean("--compare-fp32", &o.compare_fp32)
      .boolean("--kernels", &o.kernels)
      .boolean("--gpu-activity", &o.gpu_activity)
      .text("--devices", &o.devices, "0,1|cpu")
      .integers("--ranks", &o.ranks, 1)
      .custom(
          "--parallel", "sequence|spatial|whole[,...]",
          [&](const std::string& v) {
            o.parallel.clear();
            for (size_t at = 0; at <= v.size();) {
              const size_t end = std::min(v.find(',', at), v.size());
              const std::string mode = v.substr(at, end - at);
              if (mode != "sequence" && mode != "spatial" && mode != "whole") {
                throw std::invalid_argument(
                    "--parallel: expected sequence, spatial or whole (or a list), got '" + v + "'");
              }
              o.parallel.push_back(mode);
              at = end + 1;
            }
          })
      .boolean("--scaling", &o.scaling)
      .boolean("--nccl", &o.nccl)
      .boolean("--pin-cpu", &o.pin_cpu)
      .text("--trace", &o.trace, "PREFIX");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  if (o.height % 8 != 0 || o.width % 8 != 0) {
    return args.fail("--height and --width are output pixels and must be multiples of 8");
  }
  device = wm::bench::parse_device(o.device);  // checked by --device
  return -1;
}

// The same decode as parallel ranks (split in time, or by rows when `spatial`): fps, the
// speed-up against `one_seconds` (one device, this run), per rank its busy and idle seconds and
// exchange, and the scaling model (wm::bench::run_parallel).
nlohmann::ordered_json sequence_parallel(const Options& o, const wm::ModelConfig& config,
                                         const wm::Planar& latents, int slice, int64_t frames_out,
                                         double one_seconds, const std::string& mode, int ranks) {
  const bool spatial = mode == "spatial";
  wm::bench::ParallelBench b;
  b.devices = wm::bench::parse_devices(o.devices, wm::bench::parse_device(o.device));
  b.ranks = ranks > 0 ? ranks : int(b.devices.size());
  b.warmup = o.warmup;
  b.iters = o.iters;
  b.rows = spatial;
  b.whole_slices = mode == "whole";
  b.scaling = o.scaling;
  b.nccl = o.nccl;
  b.pin_cpu = o.pin_cpu;
  if (!o.trace.empty()) {
    b.trace = o.trace + (spatial ? "-rows.json" : b.whole_slices ? "-whole.json" : "-time.json");
  }
  b.model = [&](const wm::Device& d) -> std::shared_ptr<const wm::Model> {
    return wm::models::make_wan21_vae_random(config, d, o.seed);
  };
  b.slices = [&] { return wm::bench::make_slices(latents, slice); };
  b.frames_out = frames_out;
  b.one_seconds = one_seconds;
  return wm::bench::run_parallel(b);
}

}  // namespace

int bench_vae_decode(int argc, char** argv) {
  Options o;
  wm::Device device;
  if (const int status = parse(argc, argv, o, device); status >= 0) return status;

  try {
    wm::models::set_cpu_threads(o.threads);
    wm::ModelConfig config;
    config.kind = "wan2.1-vae";
    config.task = "decode";
    wm::edit_options<wm::models::Wan21VaeOptions>(config).dim = o.dim;
    config.precision = wm::bench::parse_precision(o.dtype);
    config.pinned_pool_bytes = int64_t(o.pinned_mib) << 20;
    config.tuning = o.tuning;
    auto model = wm::models::make_wan21_vae_random(config, device, o.seed);
    auto session = model->open_session(device);
    wm::parallel::limit_device_memory(device, o.max_gpu_gib);  // after the allocator's first use

    const wm::ModelTraits& traits = model->traits();
    wm::Planar latents(traits.in_channels, o.latent_frames, o.height / traits.scale_num,
                       o.width / traits.scale_num);
    std::mt19937 rng(uint32_t(o.seed));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float& v : latents.data) v = normal(rng);

    const int slice =
        o.slice_frames > 0 ? std::min(o.slice_frames, o.latent_frames) : o.latent_frames;
    const int64_t frames_out = model->output_frames(o.latent_frames);
    double total = 0, best = 1e300, warm = 0;
    int64_t shapes_before = 0;
    std::vector<wm::Planar> last;  // the last timed run's output (for --compare-fp32)
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      // Slices are prepared outside the timed region.
      std::vector<wm::Planar> slices = wm::bench::make_slices(latents, slice);
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
        throw wm::ModelError("bench: decoded " + std::to_string(frames) + " frames, expected " +
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

    nlohmann::ordered_json out;
    out["bench"] = "vae-decode";
    out["dim"] = o.dim;
    out["dtype"] = o.dtype;
    out["device"] = device.str();
    out["out_width"] = o.width;
    out["out_height"] = o.height;
    out["latent_frames"] = o.latent_frames;
    out["slice_frames"] = slice;
    out["frames"] = frames_out;
    out["iters"] = o.iters;
    out["seconds"] = seconds;
    out["best_seconds"] = best;
    // The untimed runs: on CUDA mostly cuDNN's search, once per shape and thread.
    out["warmup_seconds"] = warm;
    // Convolution shapes first run on their thread in the timed runs (each a cuDNN search when it
    // is on): 0 when the warm-up took them all.
    out["timed_new_shapes"] = wm::exec::search_gate_alone_passes() - shapes_before;
    out["fps"] = double(frames_out) / seconds;
    out["cpu_threads"] = wm::models::cpu_threads();
    out["peak_rss_mib"] = wm::bench::peak_rss_mib();
    out["tflops_ref"] = 8.5e6 * double(o.width) * o.height * double(frames_out) / seconds / 1e12;
    out["tuning"] = wm::models::wan21_tuning(o.tuning);
    if (o.max_gpu_gib > 0) out["max_gpu_gib"] = o.max_gpu_gib;
    if (o.pinned_mib > 0) out["pinned_mib"] = o.pinned_mib;
    if (device.kind == wm::Device::Kind::kCuda) {
      const double peak = wm::models::peak_device_memory_mib(device);
      out["peak_gpu_mib"] = peak;
      out["peak_gpu_gib"] = peak / 1024.0;
      const auto counts = wm::models::device_allocator_counts(device);
      out["peak_reserved_gib"] = counts.peak_reserved_mib / 1024.0;
      out["alloc_retries"] = counts.alloc_retries;
      out["segment_allocs"] = counts.segment_allocs;
      out["segments"] = counts.segments;
    }

    if (!o.ranks.empty() || !o.devices.empty()) {
      // Several rank counts: one object each ("sequence_parallel_4", ...).
      const std::vector<int> counts = o.ranks.empty() ? std::vector<int>{0} : o.ranks;
      for (int ranks : counts) {
        for (const std::string& mode : o.parallel) {
          out[mode + "_parallel" + (counts.size() > 1 ? "_" + std::to_string(ranks) : "")] =
              sequence_parallel(o, config, latents, slice, frames_out, seconds, mode, ranks);
        }
      }
    }

    if (o.profile) {
      wm::models::set_wan21_profiling(true);
      wm::models::take_wan21_stage_timings();
      const auto start = std::chrono::steady_clock::now();
      wm::bench::run_slices(device, *session, wm::bench::make_slices(latents, slice));
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      wm::models::set_wan21_profiling(false);
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (const auto& st : wm::models::take_wan21_stage_timings()) {
        nlohmann::ordered_json j;
        j["stage"] = st.name;
        j["ms"] = st.ms;
        j["conv_ms"] = st.conv_ms;
        j["conv_tflops"] = st.conv_ms > 0 ? st.flops / (st.conv_ms * 1e-3) / 1e12 : 0.0;
        j["gflop"] = st.flops / 1e9;
        j["peak_gib"] = st.peak_mib / 1024.0;
        j["calls"] = st.calls;
        stages.push_back(j);
      }
      out["profile_total_ms"] = ms;
      out["profile"] = stages;
    }

    if (o.gpu_activity) {
      const auto start = std::chrono::steady_clock::now();
      const wm::models::GpuActivity a = wm::models::measure_gpu_activity(
          [&] { wm::bench::run_slices(device, *session, wm::bench::make_slices(latents, slice)); });
      nlohmann::ordered_json j;
      j["available"] = a.available;
      j["wall_ms"] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      j["kernels"] = a.kernels;
      j["span_ms"] = a.span_ms;
      j["busy_ms"] = a.busy_ms;
      j["busy_fraction"] = a.span_ms > 0 ? a.busy_ms / a.span_ms : 0.0;
      j["short_gaps"] = a.short_gaps;
      j["short_gap_ms"] = a.short_gap_ms;
      j["long_gaps"] = a.long_gaps;
      j["long_gap_ms"] = a.long_gap_ms;
      out["gpu_activity"] = j;
    }

    if (o.kernels) {
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const auto& r :
           wm::models::wan21_kernel_rates(device, config.precision, o.height, o.width)) {
        nlohmann::ordered_json j;
        j["kernel"] = r.kind;
        j["channels"] = r.channels;
        j["threads"] = r.threads;
        j["crop"] = r.crop;
        j["ms"] = r.ms;
        j["gb_per_s"] = r.gb_per_s;
        rows.push_back(j);
      }
      out["kernels"] = rows;
    }

    if (o.compare_fp32 && config.precision != wm::Precision::kFloat32) {
      session.reset();
      model.reset();
      wm::ModelConfig ref_config = config;
      ref_config.precision = wm::Precision::kFloat32;
      // cuDNN autotuning of float32 (no TF32) shapes takes minutes; the reference needs none.
      ref_config.tuning = o.tuning + (o.tuning.empty() ? "" : ",") + "cudnn_benchmark=0";
      auto ref_model = wm::models::make_wan21_vae_random(ref_config, device, o.seed);
      auto ref_session = ref_model->open_session(device);
      std::vector<wm::Planar> ref;
      wm::bench::run_slices(device, *ref_session, wm::bench::make_slices(latents, slice), &ref);
      double lo = 1e300, hi = -1e300, se = 0, ref2 = 0, max_abs = 0;
      size_t count = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const auto& a = last.at(i).data;
        const auto& b = ref[i].data;
        for (size_t k = 0; k < b.size(); ++k) {
          const double d = double(a[k]) - double(b[k]);
          lo = std::min(lo, double(b[k]));
          hi = std::max(hi, double(b[k]));
          se += d * d;
          ref2 += double(b[k]) * double(b[k]);
          max_abs = std::max(max_abs, std::abs(d));
        }
        count += b.size();
      }
      const double mse = se / double(std::max<size_t>(count, 1));
      out["fp32_range"] = {lo, hi};
      out["psnr_vs_fp32_db"] = 10.0 * std::log10((hi - lo) * (hi - lo) / std::max(mse, 1e-30));
      out["rel_l2_vs_fp32"] = std::sqrt(se / std::max(ref2, 1e-30));
      out["max_abs_vs_fp32"] = max_abs;
    }
    std::cout << out.dump() << std::endl;
    return 0;
  } catch (const wm::Error& e) {
    std::cerr << "wmbench vae-decode: " << e.what() << "\n";
    return e.exit_code();
  }
}
