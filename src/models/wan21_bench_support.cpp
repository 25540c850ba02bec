#include "src/models/wan21_bench_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "src/models/wan21_blocks.h"

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace wm::models {

void set_cpu_threads(int n) {
  if (n > 0) at::set_num_threads(n);
}

int cpu_threads() { return at::get_num_threads(); }

void reset_peak_device_memory(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device.index));
    c10::cuda::CUDACachingAllocator::resetAccumulatedStats(
        static_cast<c10::DeviceIndex>(device.index));
  }
#else
  (void)device;
#endif
}

void limit_device_memory(const Device& device, double gib) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda && gib > 0) {
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    const double fraction = std::min(1.0, gib * double(1 << 30) / double(total_bytes));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index);
    wan21::set_memory_limit(device.index, int64_t(gib * double(1 << 30)));
  }
#else
  (void)device;
  (void)gib;
#endif
}

double peak_device_memory_mib(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index));
    return double(stats.allocated_bytes[0].peak) / double(1 << 20);  // [0]: aggregate
  }
#else
  (void)device;
#endif
  return -1;
}

AllocatorCounts device_allocator_counts(const Device& device) {
  AllocatorCounts out;
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index));
    out.alloc_retries = stats.num_alloc_retries;
    out.segment_allocs = stats.segment[0].allocated;
    out.segments = stats.segment[0].current;
    out.peak_reserved_mib = double(stats.reserved_bytes[0].peak) / double(1 << 20);
  }
#else
  (void)device;
#endif
  return out;
}

void set_wan21_profiling(bool on) { wan21::set_profiling(on); }

std::vector<StageTiming> take_wan21_stage_timings() {
  std::vector<StageTiming> out;
  for (const wan21::StageTime& s : wan21::take_profile()) {
    out.push_back({s.name, s.ms, s.conv_ms, s.flops, s.peak_mib, s.calls});
  }
  return out;
}

std::string wan21_tuning() { return wan21::Tuning::from_env().str(); }

}  // namespace wm::models
