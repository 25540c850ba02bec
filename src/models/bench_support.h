// Small torch-backed helpers for benchmarks (tools/bench_*.cpp, bench_realesrgan), behind a
// torch-free interface so tools need no LibTorch headers: LibTorch's CPU threads, the CUDA
// allocator's numbers, the GPU's activity. Implemented in src/models/torch/bench_support.cpp.
// Candidates to move to the device layer (parallel/) once it owns the allocator.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

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

// What the GPU did while `body` ran, from LibTorch's Kineto profiler (CUDA builds on LibTorch 2
// or newer; elsewhere `available` is false): kernels (memory copies and sets left out), the time
// between the first kernel's start and the last one's end, the union of the kernels' intervals,
// and the idle time between kernels, split at 20 µs: short gaps are launch latency that CUDA
// graphs could remove, long ones are the device waiting for the host. A non-empty `trace` also
// writes the profiler's Chrome trace there (every device's kernels and copies, and each host
// thread's CUDA calls with their waits: where ranks of a split stall); `trace_written` says so.
struct GpuActivity {
  bool available = false;
  int64_t kernels = 0;
  double span_ms = 0;
  double busy_ms = 0;
  double short_gap_ms = 0;
  int64_t short_gaps = 0;
  double long_gap_ms = 0;
  int64_t long_gaps = 0;
  bool trace_written = false;
};
GpuActivity measure_gpu_activity(const std::function<void()>& body, const std::string& trace = {});

}  // namespace wm::models
