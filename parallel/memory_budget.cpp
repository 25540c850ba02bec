#include "parallel/memory_budget.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "parallel/torch_side.h"

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

void limit_device_memory(const Device& device, double gib) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda && gib > 0) {
    const TorchDevices& torch = torch_devices();
    const CudaMemory m = torch.cuda_memory(device.index);
    const double fraction = std::min(1.0, gib * double(1 << 30) / double(m.total));
    torch.cap_cuda_allocator(device.index, fraction);
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
    // Cached blocks of LibTorch's allocator are ours to reuse.
    const CudaMemory cuda = torch_devices().cuda_memory(device.index);
    m.peak = cuda.peak;
    const int64_t budget = memory_budget(device.index);
    m.usable = budget > 0 ? budget : cuda.free + cuda.reserved;
  }
#else
  (void)device;
#endif
  return m;
}

}  // namespace wm::parallel
