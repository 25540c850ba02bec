// The process's memory budgets, one owner for each: the host's (one pool shared by every session
// and lane, measured once) and each device's (what the sessions running there may plan with).
// Models reach them through exec::DeviceContext (host_memory_available, hold_host_memory,
// device_memory_cap); they never read /proc/meminfo or cudaMemGetInfo themselves.
// Torch-free interface (tools and the scheduler include it). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "src/exec/memory_hold.h"
#include "src/model.h"

namespace wm::parallel {

// A budget of bytes that sessions hold shares of. Its capacity is set, or measured by `measure`
// once, on first need, and kept: a second session must not count again what the first one's
// share already took from the machine (each SeedVR2 session used to read the host's free memory
// for itself). A share (hold()) stands until dropped; what a holder may plan with is the
// capacity less the others' shares (available()). A budget accounts for memory, it allocates
// none: shares never fail, and may together exceed the capacity (available() is then <= 0).
class MemoryPool {
 public:
  explicit MemoryPool(std::function<int64_t()> measure);
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // bytes > 0: the capacity from now on; 0: measure it (again) on next need.
  void set_capacity(int64_t bytes);
  int64_t capacity();
  // The sum of the shares held now.
  int64_t held() const;
  // What the holder of `mine` (or a session holding nothing: nullptr) may plan with: the
  // capacity less the shares held by others. `mine` must be a share of this pool.
  int64_t available(const exec::MemoryHold* mine = nullptr);
  // A share of `bytes`, released when dropped. The pool must outlive it.
  std::unique_ptr<exec::MemoryHold> hold(int64_t bytes);

 private:
  class Share;
  std::function<int64_t()> measure_;
  mutable std::mutex mutex_;
  int64_t capacity_ = 0;  // 0: not measured yet
  int64_t held_ = 0;
};

// What the host has available now (MemAvailable: free plus what the kernel can reclaim; else its
// free pages), in bytes.
int64_t host_available_memory();

// The host memory budget of the process: measured once, when a session first asks, as what the
// host has available then less a reserve for the pipeline's frames and the encoder (an eighth of
// it, at least 8 GiB; at least 1 byte). set_capacity() replaces it (tests, tools).
MemoryPool& host_memory();

// Each device's budget, per device index: 0 (the default) leaves it to what the device has free
// when a session plans (device_memory).
void set_memory_budget(int device, int64_t bytes);
int64_t memory_budget(int device);

// Caps what LibTorch's allocator may take on a CUDA device (setMemoryFraction: allocations beyond
// it fail as out-of-memory, so cuDNN skips algorithms whose workspace does not fit, and the Wan2.1
// session retries with shorter chunks) and sets the device's budget to the same. Call it after
// the allocator's first use. No-op for the CPU or gib <= 0.
void limit_device_memory(const Device& device, double gib);

// What a device can give this process: for sizing input lanes (scheduler/input_lanes.h) and, as
// `usable`, the cap the sessions on the device plan with (exec::DeviceContext::device_memory_cap).
struct DeviceMemory {
  // The budget when one is set (limit_device_memory), else what the device has free plus what
  // LibTorch's allocator already holds (cached blocks are ours to reuse). -1: not a CUDA device.
  int64_t usable = -1;
  // The allocator's peak of allocated bytes on the device since the process started; -1: not CUDA.
  int64_t peak = -1;
};
DeviceMemory device_memory(const Device& device);

}  // namespace wm::parallel
