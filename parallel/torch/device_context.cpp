#include "parallel/device_context.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#include <ATen/native/ConvUtils.h>
#endif
#endif

#include "parallel/memory_budget.h"
#include "parallel/torch/offload.h"
#include "src/base/error.h"
#include "src/base/log_text.h"

namespace wm::parallel {
namespace {

// A worker's context (`worker`: made on its thread, whose current device and stream it sets), or
// a thread's direct context (exec::DeviceLayer::direct_context: it leaves the thread's current
// device and stream alone; its caller makes the compute stream current per call).
class WorkerContext final : public exec::DeviceContext {
 public:
  WorkerContext(const Device& d, bool worker) : dev(d) {
#ifdef WMBATCH_WITH_CUDA
    if (dev.kind == Device::Kind::kCuda) {
      const c10::DeviceIndex index = c10::DeviceIndex(dev.index);
      if (worker) c10::cuda::set_device(index);
      compute = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
      if (worker) c10::cuda::setCurrentCUDAStream(*compute);
    }
#else
    (void)worker;
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
  int64_t device_memory_cap() const override {
    return dev.kind == Device::Kind::kCuda ? device_memory(dev).usable : 0;
  }
  int64_t host_memory_available(const exec::MemoryHold* mine) const override {
    return host_memory().available(mine);
  }
  std::unique_ptr<exec::MemoryHold> hold_host_memory(int64_t bytes) override {
    return host_memory().hold(bytes);
  }
  at::Tensor host_empty_like(const at::Tensor& like, at::MemoryFormat format) override {
    return at::empty_like(
        like, like.options().device(at::kCPU).pinned_memory(dev.kind == Device::Kind::kCuda),
        format);
  }
  c10::Stream compute_stream() override {
#ifdef WMBATCH_WITH_CUDA
    if (compute) return compute->unwrap();
#endif
    throw Error("device worker " + dev.str() + ": no compute stream", kExitSoftware);
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

constexpr const char* kLogger = "device";

// The process's LibTorch settings (exec::DeviceLayer::ask) and the threads' direct contexts.
class Layer final : public exec::DeviceLayer {
 public:
  void ask(const exec::DeviceSettings& settings) override {
    std::lock_guard<std::mutex> lock(mutex_);
#ifdef WMBATCH_WITH_CUDA
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    if (settings.growable_segments && !growable_) {
      growable_ = true;
      // Read when the allocator first allocates; a user's setting wins.
      setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
    }
#endif
    if (settings.peers_wait_on_device && !peers_wait_) {
      peers_wait_ = true;
      if (benchmark_ > 0) {
        log::info(kLogger,
                  "cuDNN benchmark mode off for this process: an NCCL group waits on the devices");
      }
      benchmark_ = 0;
      at::globalContext().setBenchmarkCuDNN(false);
    }
    if (settings.cudnn_benchmark >= 0) {
      if (benchmark_ < 0) {
        benchmark_ = settings.cudnn_benchmark;
        at::globalContext().setBenchmarkCuDNN(benchmark_ != 0);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
        // LibTorch empties every device's allocator cache after each cuDNN search (a conv shape
        // first seen mid-run): it waits for every device's pending events and frees memory
        // (cudaFree waits for the whole device). With ranks of one process on several GPUs
        // that stalls them all, and over NCCL it deadlocked (issue 30's hang: a rank's thread
        // in that wait, holding the other GPU's allocator lock, while the other rank's send
        // waited on the device for the receive this rank had not queued yet). The cache is
        // ours to reuse: the plans count only allocated memory.
        at::native::_cudnn_set_conv_benchmark_empty_cache(false);
#endif
      } else if (benchmark_ != settings.cudnn_benchmark) {
        log::info(kLogger, std::string("cuDNN benchmark mode stays ") +
                               (benchmark_ ? "on" : "off") + " for this process (" +
                               (peers_wait_ ? "an NCCL group waits on the devices"
                                            : "the first model that asked chose it") +
                               ")");
      }
    }
    if (settings.cudnn_benchmark_limit > 0 && benchmark_limit_ == 0) {
      benchmark_limit_ = settings.cudnn_benchmark_limit;
      at::globalContext().setBenchmarkLimitCuDNN(benchmark_limit_);
    }
    if (settings.exact_float32_convs && !exact_convs_) {
      exact_convs_ = true;
      at::globalContext().setAllowTF32CuDNN(false);
    }
    if (settings.exact_float32_matmuls && !exact_matmuls_) {
      exact_matmuls_ = true;
      at::globalContext().setAllowTF32CuBLAS(false);
    }
#else
    (void)settings;
#endif
  }

  exec::DeviceContext& direct_context(at::Device device) override {
    thread_local std::map<std::string, std::unique_ptr<WorkerContext>> contexts;
    const Device d = device.is_cuda() ? Device{Device::Kind::kCuda, int(device.index())}
                                      : Device{Device::Kind::kCpu, 0};
    std::unique_ptr<WorkerContext>& c = contexts[d.str()];
    if (!c) c = std::make_unique<WorkerContext>(d, /*worker=*/false);
    return *c;
  }

 private:
  std::mutex mutex_;
  bool growable_ = false;
  int benchmark_ = -1;
  int benchmark_limit_ = 0;  // cuDNN search: plans timed per shape (0: LibTorch's default)
  bool peers_wait_ = false;
  bool exact_convs_ = false, exact_matmuls_ = false;
};

// Installed when this object is linked in or loaded (torch_entry.cpp makes sure it is).
const bool g_installed = [] {
  static Layer layer;
  exec::install_device_layer(&layer);
  return true;
}();

}  // namespace

std::unique_ptr<exec::DeviceContext> make_device_context(const Device& device) {
  return std::make_unique<WorkerContext>(device, /*worker=*/true);
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
  // so use it once first. A capped budget is planned close to its edge: growable segments first
  // (read at that first use; without them a SeedVR2 decode at 1080p in 16 GiB that fitted a
  // fresh allocator ran out of memory in the next batch's fragmented cache).
  exec::DeviceSettings settings;
  settings.growable_segments = true;
  exec::device_layer().ask(settings);
  at::empty({1}, at::TensorOptions().device(at::kCUDA, c10::DeviceIndex(device)));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, device);
#else
  (void)device;
  (void)fraction;
#endif
}

}  // namespace wm::parallel
