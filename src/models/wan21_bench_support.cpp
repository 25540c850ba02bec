#include "src/models/wan21_bench_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

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
  }
#else
  (void)device;
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

}  // namespace wm::models
