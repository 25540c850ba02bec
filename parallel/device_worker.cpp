#include "parallel/device_worker.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <optional>
#include <utility>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "parallel/memory_budget.h"
#include "parallel/offload.h"
#include "src/base/error.h"
#include "src/exec/device_context.h"

namespace wm::parallel {

struct DeviceWorker::Impl final : public exec::DeviceContext {
  explicit Impl(const Device& d) : dev(d) {}

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

  // On the worker's thread, before any call: the device and the compute stream it keeps.
  void enter() {
#ifdef WMBATCH_WITH_CUDA
    if (dev.kind == Device::Kind::kCuda) {
      const c10::DeviceIndex index = c10::DeviceIndex(dev.index);
      c10::cuda::set_device(index);
      compute = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
      c10::cuda::setCurrentCUDAStream(*compute);
    }
#endif
  }

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

namespace {
std::string thread_name(const Device& device, int lane) {
  return device.kind == Device::Kind::kCuda
             ? "gpu" + std::to_string(device.index) + "." + std::to_string(lane)
             : "cpu" + std::to_string(lane);
}
}  // namespace

DeviceWorker::DeviceWorker(const Device& device, int lane)
    : device_(device),
      lane_(lane),
      impl_(std::make_unique<Impl>(device)),
      thread_(thread_name(device, lane)) {
  thread_.call([this] { impl_->enter(); });
}

DeviceWorker::~DeviceWorker() = default;

exec::DeviceContext* DeviceWorker::context() { return impl_.get(); }

WorkerStats DeviceWorker::stats() const {
  WorkerStats s;
  s.busy_seconds = double(busy_ns_.load()) * 1e-9;
  s.calls = calls_.load();
  s.frames = frames_.load();
#ifdef WMBATCH_WITH_CUDA
  if (device_.kind == Device::Kind::kCuda) {
    // The allocator refuses ("Invalid device argument") until its first allocation on the
    // device, which a model without weights (lanczos) has not made yet: nothing allocated.
    s.peak_memory_mib = 0;
    try {
      const auto stats =
          c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex(device_.index));
      s.peak_memory_mib = double(stats.allocated_bytes[0].peak) / double(1 << 20);
    } catch (const c10::Error&) {
    }
  }
#endif
  return s;
}

DeviceWorker& device_worker(const Device& device, int lane) {
  static std::mutex mutex;
  // Deliberately never freed: see the header.
  static auto* workers = new std::map<std::pair<std::string, int>, std::unique_ptr<DeviceWorker>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<DeviceWorker>& w = (*workers)[{device.str(), lane}];
  if (!w) w = std::make_unique<DeviceWorker>(device, lane);
  return *w;
}

}  // namespace wm::parallel
