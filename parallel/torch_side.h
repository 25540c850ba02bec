// The LibTorch side of the device layer, as the torch-free code reaches it (the models' half, and
// why there are two halves at all: src/models/torch_side.h). Built into wm_parallel_torch: the
// worker's device context (streams, pinned staging, the output copier), the halo exchanges, the
// CUDA allocator's numbers, LibTorch's errors. The rest of parallel/ calls it only through this
// table, so a CPU job of a built-in resampler runs its device workers without loading LibTorch.
//
// Torch-free header. Threading: torch_devices() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::exec {
class DeviceContext;
}

namespace wm::parallel {

class ExchangeGroup;
class FramePath;
struct FramePathConfig;

// Raised when the table changes shape.
constexpr int kTorchDevicesAbi = 2;

// LibTorch's CUDA caching allocator and cudaMemGetInfo for one device, in bytes.
struct CudaMemory {
  int64_t peak = 0;      // allocated bytes' peak since the start (0 before the first allocation)
  int64_t reserved = 0;  // held by the allocator now
  int64_t free = 0;      // free on the device
  int64_t total = 0;
};

struct TorchDevices {
  int abi = kTorchDevicesAbi;
  size_t size = sizeof(TorchDevices);
  // CUDA devices LibTorch sees.
  int (*cuda_device_count)() = nullptr;
  // A device worker's context (device_worker.h): called on the worker's thread, which it makes
  // compute on the device (CUDA: current device, a compute stream of its own as the current
  // stream).
  std::unique_ptr<exec::DeviceContext> (*make_context)(const Device& device) = nullptr;
  CudaMemory (*cuda_memory)(int device) = nullptr;
  // Caps LibTorch's allocator on `device` at `fraction` of its memory (setMemoryFraction).
  void (*cap_cuda_allocator)(int device, double fraction) = nullptr;
  // The halo exchanges of a sequence-parallel group (halo_inprocess.h, halo_nccl.h).
  std::unique_ptr<ExchangeGroup> (*inprocess_group)(int ranks,
                                                    std::chrono::milliseconds timeout) = nullptr;
  std::unique_ptr<ExchangeGroup> (*nccl_group)(const std::vector<int>& devices,
                                               std::chrono::milliseconds timeout) = nullptr;
  // Throws LibTorch's out-of-memory error (`oom`) or its generic error with `message` (the fault
  // injection of rank_fault.h raises what a real failing rank would).
  void (*throw_torch_error)(bool oom, const std::string& message) = nullptr;
  // When `failure` is one of LibTorch's errors, throws it as ModelError "<who><first line>" (its
  // out-of-memory error as "<who>out of device memory: ..."), exit 1; else returns.
  void (*rethrow_torch_error)(std::exception_ptr failure, const std::string& who) = nullptr;
  // The device frame path of a model (frame_path.h).
  std::unique_ptr<FramePath> (*make_frame_path)(const Model& model, const Device& device,
                                                const FramePathConfig& config) = nullptr;
  // On CPU rank `rank`'s worker thread: that thread and its intra-op threads on cores of their
  // own (torch/cpu_pinning.h); rank < 0 undoes it. Returns the cores pinned (0: none).
  int (*pin_cpu_rank)(int rank, int ranks) = nullptr;
};

// The table; loads the LibTorch side first where this program does not link it (throws
// wm::Error, exit 70, when it cannot).
const TorchDevices& torch_devices();

}  // namespace wm::parallel
