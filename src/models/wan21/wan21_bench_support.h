// The Wan2.1 VAE's benchmark support (tools/bench_vae.cpp, tools/bench_vae_job.cpp), behind a
// torch-free interface so tools need no LibTorch headers: its per-stage profile, its tuning text,
// its fused kernels' bandwidth. The helpers every family's bench uses are in
// src/models/bench_support.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::models {

// Per-stage timings of the Wan2.1 VAE (synchronising the device around each block and conv;
// see wan21::set_profiling). take_ returns what was gathered since the last take and resets.
struct StageTiming {
  std::string name;
  double ms = 0;
  double conv_ms = 0;
  double flops = 0;
  double peak_mib = 0;
  int64_t calls = 0;
};
void set_wan21_profiling(bool on);
std::vector<StageTiming> take_wan21_stage_timings();
// The execution choices a Wan2.1 model with ModelConfig::tuning = `text` uses, spelled out.
std::string wan21_tuning(const std::string& text);

// Bandwidth of the Wan2.1 decoder's fused memory passes on a CUDA device (empty elsewhere), on
// activations of the decoder's three widths for an height × width output (4 frames each):
// "norm" (RMSNorm + SiLU into a padded buffer's body: reads and writes the activation once),
// "sum" (y += bias + residual: two reads, one write), per threads-per-pixel choice (0 = auto),
// packed or reading a crop (a view, as tail tiles read).
struct KernelRate {
  std::string kind;
  int64_t channels = 0;
  int threads = 0;
  bool crop = false;
  double ms = 0;
  double gb_per_s = 0;
};
std::vector<KernelRate> wan21_kernel_rates(const Device& device, Precision precision, int height,
                                           int width);

}  // namespace wm::models
