#include "parallel/device_context.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "parallel/memory_budget.h"
#include "parallel/torch/offload.h"
#include "src/base/error.h"

namespace wm::parallel {
namespace {

class WorkerContext final : public exec::DeviceContext {
 public:
  explicit WorkerContext(const Device& d) : dev(d) {
#ifdef WMBATCH_WITH_CUDA
    if (dev.kind == Device::Kind::kCuda) {
      const c10::DeviceIndex index = c10::DeviceIndex(dev.index);
      c10::cuda::set_device(index);
      compute = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
      c10::cuda::setCurrentCUDAStream(*compute);
    }
#endif
  }

  at::Device device() const override {
    return dev.kind == Device::Kind::kCuda ? at::Device(at::kCUDA, c10::DeviceIndex(dev.index))
                                           : at::Device(at::kCPU);
  }
  exec::OutputSink& output_sink(int64_t pool_bytes) override {
    if (!offload || offload_pool != pool_bytes) {
      offload.reset();  // its copier finishes first: one pool at a time
      offload = std::make_unique<OutputOffload>(pool_bytes);
      offload_pool = pool_bytes;
    }
    return *offload;
  }
  exec::InputStager& input_stager(int64_t pool_bytes) override {
    if (!staging || staging_pool != pool_bytes) {
      staging.reset();
      staging = std::make_unique<InputStaging>(pool_bytes);
      staging_pool = pool_bytes;
    }
    return *staging;
  }
  int64_t memory_budget() const override {
    return dev.kind == Device::Kind::kCuda ? parallel::memory_budget(dev.index) : 0;
  }
  c10::Stream side_stream(int k) override {
#ifdef WMBATCH_WITH_CUDA
    if (dev.kind == Device::Kind::kCuda && (k == 0 || k == 1)) {
      std::optional<c10::cuda::CUDAStream>& s = side[size_t(k)];
      if (!s)
        s = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, c10::DeviceIndex(dev.index));
      return s->unwrap();
    }
#endif
    throw Error("device worker " + dev.str() + ": no side stream " + std::to_string(k),
                kExitSoftware);
  }

 private:
  Device dev;
  std::unique_ptr<OutputOffload> offload;
  int64_t offload_pool = 0;
  std::unique_ptr<InputStaging> staging;
  int64_t staging_pool = 0;
#ifdef WMBATCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> compute;
  std::optional<c10::cuda::CUDAStream> side[2];
#endif
};

}  // namespace

std::unique_ptr<exec::DeviceContext> make_device_context(const Device& device) {
  return std::make_unique<WorkerContext>(device);
}

CudaMemory cuda_memory(int device) {
  CudaMemory m;
#ifdef WMBATCH_WITH_CUDA
  // The allocator refuses ("Invalid device argument") until its first allocation on the device,
  // which a model without weights (lanczos) has not made yet: nothing allocated.
  try {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex(device));
    m.peak = int64_t(stats.allocated_bytes[0].peak);  // [0]: aggregate
    m.reserved = int64_t(stats.reserved_bytes[0].current);
  } catch (const c10::Error&) {
  }
  // cudaMemGetInfo answers for the calling thread's current device.
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != device) cudaSetDevice(device);
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous != device) cudaSetDevice(previous);
  m.free = int64_t(free_bytes);
  m.total = int64_t(total_bytes);
#else
  (void)device;
#endif
  return m;
}

void cap_cuda_allocator(int device, double fraction) {
#ifdef WMBATCH_WITH_CUDA
  // setMemoryFraction throws "Allocator not initialized for device" before the allocator's
  // first use on that device (seen: wmbench seedvr2-upscale --max-gpu-gib 16 aborted with 134),
  // so use it once first.
  at::empty({1}, at::TensorOptions().device(at::kCUDA, c10::DeviceIndex(device)));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device);
#else
  (void)device;
  (void)fraction;
#endif
}

}  // namespace wm::parallel
