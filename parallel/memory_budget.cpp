#include "parallel/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "parallel/torch_side.h"

namespace wm::parallel {

class MemoryPool::Share final : public exec::MemoryHold {
 public:
  Share(MemoryPool& pool, int64_t bytes) : pool_(pool), bytes_(bytes) {}
  ~Share() override {
    std::lock_guard<std::mutex> lock(pool_.mutex_);
    pool_.held_ -= bytes_;
  }
  int64_t bytes() const override {
    std::lock_guard<std::mutex> lock(pool_.mutex_);
    return bytes_;
  }
  void resize(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(pool_.mutex_);
    pool_.held_ += bytes - bytes_;
    bytes_ = bytes;
  }

 private:
  friend class MemoryPool;
  MemoryPool& pool_;
  int64_t bytes_;  // under pool_.mutex_
};

MemoryPool::MemoryPool(std::function<int64_t()> measure) : measure_(std::move(measure)) {}

void MemoryPool::set_capacity(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = std::max<int64_t>(bytes, 0);
}

int64_t MemoryPool::capacity() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Measured under the lock: two sessions asking at once measure once.
  if (capacity_ == 0) capacity_ = std::max<int64_t>(measure_(), 1);
  return capacity_;
}

int64_t MemoryPool::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

int64_t MemoryPool::available(const exec::MemoryHold* mine) {
  const int64_t cap = capacity();
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t own = mine ? static_cast<const Share*>(mine)->bytes_ : 0;
  return cap - (held_ - own);
}

std::unique_ptr<exec::MemoryHold> MemoryPool::hold(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ += bytes;
  return std::make_unique<Share>(*this, bytes);
}

int64_t host_available_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      const long long kib = std::atoll(line.c_str() + 13);
      if (kib > 0) return int64_t(kib) << 10;
    }
  }
  return int64_t(sysconf(_SC_AVPHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
}

MemoryPool& host_memory() {
  // Deliberately never freed: sessions of process-wide models may hold shares until exit.
  static auto* pool = new MemoryPool([] {
    const int64_t avail = host_available_memory();
    return avail - std::max<int64_t>(avail / 8, int64_t(8) << 30);
  });
  return *pool;
}

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
