// Small torch-backed helpers for benchmarks (tools/bench_vae.cpp), behind a torch-free
// interface so tools need no LibTorch headers. Candidates to move to parallel/devices.h.
#pragma once

#include "src/model.h"

namespace wm::models {

// Intra-op CPU threads LibTorch uses (at::set_num_threads); n <= 0 leaves the default.
void set_cpu_threads(int n);
int cpu_threads();
// Peak memory allocated by LibTorch on a CUDA device since the last reset, in MiB; -1 for the
// CPU or a build without CUDA.
void reset_peak_device_memory(const Device& device);
double peak_device_memory_mib(const Device& device);

}  // namespace wm::models
