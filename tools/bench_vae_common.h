// Pieces shared by the Wan2.1 VAE benchmarks (tools/bench_vae.cpp, tools/bench_vae_job.cpp):
// option values, slicing latents the way the job runner does, running slices on one session,
// and the process's peak resident memory. Torch-free (models through src/model.h only).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/scaling_model.h"
#include "src/base/planar.h"
#include "src/model.h"
#include "tools/bench_args.h"

namespace wm::bench {

// The flags the VAE benchmarks share, added to `args` for an options struct with these members:
// dim, latent_frames, height, width, dtype, device, warmup, iters, slice_frames, threads, seed,
// tuning, max_gpu_gib, pinned_mib (their values now are the defaults). --device is checked as it
// is read, so parse_device(o.device) afterwards does not throw.
template <typename Options>
void add_shared_flags(Args& args, Options& o) {
  args.integer("--dim", &o.dim, 2)
      .integer("--latent-frames", &o.latent_frames, 1, "T")
      .integer("--height", &o.height, 8, "H")
      .integer("--width", &o.width, 8, "W")
      .choice("--dtype", &o.dtype, {"fp32", "bf16", "fp16"})
      .custom("--device", "cpu|cuda:N",
              [&o](const std::string& v) {
                parse_device(v);  // checked here; the benchmark reads o.device
                o.device = v;
              })
      .integer("--warmup", &o.warmup, 0, "N")
      .integer("--iters", &o.iters, 1, "N")
      .integer("--slice-frames", &o.slice_frames, 0, "S")
      .integer("--threads", &o.threads, 0, "N")
      .integer("--seed", &o.seed, "N")
      .text("--tuning", &o.tuning, "KEY=V,...")
      .integer("--max-gpu-gib", &o.max_gpu_gib, 0, "N")
      .integer("--pinned-mib", &o.pinned_mib, 0, "N");
}

// The latents [C, T, h, w] cut into consecutive slices of `slice` frames (the last one shorter),
// as decode_latents cuts its input.
std::vector<Planar> make_slices(const Planar& latents, int slice);

// Runs `slices` in order on one session as one sequence (the first with first_slice set), on
// lane 0 of `device`'s workers as a job does (its stream, staging, output copier); a
// sequence-parallel session (which dispatches to its ranks' workers) is called directly.
// Returns the frames produced; the outputs are appended to `outputs` when it is not null and
// freed slice by slice otherwise (as a streaming job holds them).
// `depth`: slices queued and not yet taken before the oldest is taken (a split with whole
// slices keeps one per rank busy).
int64_t run_slices(const Device& device, ModelSession& session, std::vector<Planar> slices,
                   std::vector<Planar>* outputs = nullptr, int depth = 1);

// The rank devices of --devices ("cpu", "0,1"; empty: `fallback`). Throws
// std::invalid_argument naming a bad one.
std::vector<Device> parse_devices(const std::string& devices, const Device& fallback);

// A run measured again as sequence-parallel ranks (wmbench vae-decode and seedvr2 --ranks).
struct ParallelBench {
  std::vector<Device> devices;  // rank r on devices[r % devices.size()]
  int ranks = 1;
  int warmup = 0, iters = 1;
  bool rows = false;          // split by rows (else in time)
  bool whole_slices = false;  // a time split giving each slice whole to one rank in turn
  bool nccl = false;          // the NCCL exchange (one rank per GPU; else in-process)
  bool scaling = true;        // one more run with the ranks one after another: the scaling model
  bool pin_cpu = true;        // CPU ranks on cores of their own (SequenceParallelOptions::pin_cpu)
  // Non-empty: one more run under LibTorch's profiler, its Chrome trace written here (CUDA
  // builds on LibTorch 2), and "trace" in the JSON (the file, kernels, GPU busy and gaps).
  std::string trace;
  // The model on a device (the same weights on each), and the input as slices (made per run).
  std::function<std::shared_ptr<const Model>(const Device&)> model;
  std::function<std::vector<Planar>()> slices;
  int64_t frames_out = 0;
  double one_seconds = 0;  // the one-device run of this invocation
};
// Runs `b` (warm-up runs, then timed ones) and returns: split, ranks, devices, seconds, fps,
// speedup (against one_seconds), the exchange's bytes, messages and wait per run, per rank
// ("per_rank") its busy and idle seconds, compute seconds (b.scaling), exchange bytes, messages
// and wait, and "scaling" (scaling_model).
nlohmann::ordered_json run_parallel(const ParallelBench& b);

// The scaling model's prediction (parallel/scaling_model.h) from measured per-rank loads, as
// wmbench prints it: per link (NVLink, PCIe 5, and no exchange at all) the seconds the ranks
// would take on devices of their own and the speed-up against `one_seconds`. `overlapped`: a
// time split (sends beside compute); else a row split (they add up).
nlohmann::ordered_json scaling_model(double one_seconds,
                                     const std::vector<parallel::RankLoad>& loads, bool overlapped);

// Peak resident memory of this process in MiB (VmHWM). reset_peak_rss() restarts it from the
// current resident size (Linux /proc/self/clear_refs); false when the kernel refused, and the
// peak then stays the process's.
double peak_rss_mib();
bool reset_peak_rss();

}  // namespace wm::bench
