// Small torch-backed helpers for benchmarks (tools/bench_vae.cpp), behind a torch-free
// interface so tools need no LibTorch headers. Candidates to move to parallel/devices.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::models {

// Intra-op CPU threads LibTorch uses (at::set_num_threads); n <= 0 leaves the default.
void set_cpu_threads(int n);
int cpu_threads();
// Peak memory allocated by LibTorch on a CUDA device since the last reset, in MiB; -1 for the
// CPU or a build without CUDA.
void reset_peak_device_memory(const Device& device);
double peak_device_memory_mib(const Device& device);
// The allocator's work since the last reset_peak_device_memory: allocations that had to free its
// cache and retry (each synchronises the device), device allocations made, peak reserved MiB.
struct AllocatorCounts {
  int64_t alloc_retries = 0;
  int64_t segment_allocs = 0;
  int64_t segments = 0;  // now (a handful with expandable segments)
  double peak_reserved_mib = 0;
};
AllocatorCounts device_allocator_counts(const Device& device);

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

// What the GPU did while `body` ran, from LibTorch's Kineto profiler (CUDA builds on LibTorch 2
// or newer; elsewhere `available` is false): kernels (memory copies and sets left out), the time
// between the first kernel's start and the last one's end, the union of the kernels' intervals,
// and the idle time between kernels, split at 20 µs: short gaps are launch latency that CUDA
// graphs could remove, long ones are the device waiting for the host.
struct GpuActivity {
  bool available = false;
  int64_t kernels = 0;
  double span_ms = 0;
  double busy_ms = 0;
  double short_gap_ms = 0;
  int64_t short_gaps = 0;
  double long_gap_ms = 0;
  int64_t long_gaps = 0;
};
GpuActivity measure_gpu_activity(const std::function<void()>& body);

}  // namespace wm::models
