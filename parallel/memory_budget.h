// The memory budget of each device: what the sessions running there may plan to use (the
// Wan2.1 decode tail sizes its chunks and tiles from it). Process-wide, per device index.
// Torch-free interface (tools and the scheduler include it).
#pragma once

#include <cstdint>

#include "src/model.h"

namespace wm::parallel {

// 0 (the default): what the device has free when a session plans.
void set_memory_budget(int device, int64_t bytes);
int64_t memory_budget(int device);

// Caps what LibTorch's allocator may take on a CUDA device (setMemoryFraction: allocations beyond
// it fail as out-of-memory, so cuDNN skips algorithms whose workspace does not fit, and the Wan2.1
// session retries with shorter chunks) and sets the device's budget to the same. Call it after
// the allocator's first use. No-op for the CPU or gib <= 0.
void limit_device_memory(const Device& device, double gib);

// What a device can give this process, for sizing input lanes (scheduler/input_lanes.h).
struct DeviceMemory {
  // The budget when one is set (limit_device_memory), else what the device has free plus what
  // LibTorch's allocator already holds (cached blocks are ours to reuse). -1: not a CUDA device.
  int64_t usable = -1;
  // The allocator's peak of allocated bytes on the device since the process started; -1: not CUDA.
  int64_t peak = -1;
};
DeviceMemory device_memory(const Device& device);

}  // namespace wm::parallel
