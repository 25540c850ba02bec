#include "parallel/memory_budget.h"

#include <algorithm>
#include <map>
#include <mutex>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace wm::parallel {

namespace {
std::mutex g_mutex;
std::map<int, int64_t> g_budgets;
}  // namespace

void set_memory_budget(int device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_budgets[device] = bytes;
}

int64_t memory_budget(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_budgets.find(device);
  return it == g_budgets.end() ? 0 : it->second;
}

#ifdef WMBATCH_WITH_CUDA
namespace {
// cudaMemGetInfo of device `index` (it answers for the calling thread's current device).
void mem_info(int index, size_t& free_bytes, size_t& total_bytes) {
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != index) cudaSetDevice(index);
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous != index) cudaSetDevice(previous);
}
}  // namespace
#endif

void limit_device_memory(const Device& device, double gib) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda && gib > 0) {
    size_t free_bytes = 0, total_bytes = 0;
    mem_info(device.index, free_bytes, total_bytes);
    const double fraction = std::min(1.0, gib * double(1 << 30) / double(total_bytes));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device.index);
    set_memory_budget(device.index, int64_t(gib * double(1 << 30)));
  }
#else
  (void)device;
  (void)gib;
#endif
}

DeviceMemory device_memory(const Device& device) {
  DeviceMemory m;
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    // Before the allocator's first allocation on the device its stats throw: nothing held yet.
    int64_t reserved = 0;
    m.peak = 0;
    try {
      const auto stats =
          c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex(device.index));
      m.peak = int64_t(stats.allocated_bytes[0].peak);
      reserved = int64_t(stats.reserved_bytes[0].current);
    } catch (const c10::Error&) {
    }
    const int64_t budget = memory_budget(device.index);
    if (budget > 0) {
      m.usable = budget;
    } else {
      size_t free_bytes = 0, total_bytes = 0;
      mem_info(device.index, free_bytes, total_bytes);
      m.usable = int64_t(free_bytes) + reserved;
    }
  }
#else
  (void)device;
#endif
  return m;
}

}  // namespace wm::parallel
