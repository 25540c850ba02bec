#include "parallel/device_worker.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <utility>

#include "parallel/torch_side.h"
#include "src/base/error.h"
#include "src/exec/device_context.h"

namespace wm::parallel {

// The worker as the models see it: forwards to the LibTorch side's context
// (parallel/device_context.h), made on the worker's thread — for a GPU when the worker starts
// (it makes the device and the compute stream current there), for the CPU on a model's first
// call (a built-in resampler never makes one: a CPU lanczos job does not load LibTorch).
struct DeviceWorker::Impl final : public exec::DeviceContext {
  explicit Impl(const Device& d) : dev(d) {}

  exec::DeviceContext& real() const {
    std::call_once(made, [this] { ctx = torch_devices().make_context(dev); });
    return *ctx;
  }
  at::Device device() const override { return real().device(); }
  exec::OutputSink& output_sink(int64_t pool_bytes) override {
    return real().output_sink(pool_bytes);
  }
  exec::InputStager& input_stager(int64_t pool_bytes) override {
    return real().input_stager(pool_bytes);
  }
  int64_t memory_budget() const override { return real().memory_budget(); }
  int64_t device_memory_cap() const override { return real().device_memory_cap(); }
  int64_t host_memory_available(const exec::MemoryHold* mine) const override {
    return real().host_memory_available(mine);
  }
  std::unique_ptr<exec::MemoryHold> hold_host_memory(int64_t bytes) override {
    return real().hold_host_memory(bytes);
  }
  at::Tensor host_empty_like(const at::Tensor& like, at::MemoryFormat format) override {
    return real().host_empty_like(like, format);
  }
  c10::Stream compute_stream() override { return real().compute_stream(); }
  c10::Stream side_stream(int k) override { return real().side_stream(k); }

  Device dev;
  mutable std::once_flag made;
  mutable std::unique_ptr<exec::DeviceContext> ctx;
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
  if (device.kind == Device::Kind::kCuda) thread_.call([this] { impl_->real(); });
}

DeviceWorker::~DeviceWorker() = default;

exec::DeviceContext* DeviceWorker::context() { return impl_.get(); }

WorkerStats DeviceWorker::stats() const {
  WorkerStats s;
  s.busy_seconds = double(busy_ns_.load()) * 1e-9;
  s.calls = calls_.load();
  s.frames = frames_.load();
  if (device_.kind == Device::Kind::kCuda) {
    s.peak_memory_mib = double(torch_devices().cuda_memory(device_.index).peak) / double(1 << 20);
  }
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
