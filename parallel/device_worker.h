// A device worker: one lasting thread on one device (a GPU, or the CPU), the streams that thread
// computes on, the pinned staging pools and the output copier its sessions use, and the
// device's memory budget. Models reach all of it through exec::DeviceContext
// (src/exec/device_context.h), handed to them in RunContext::device; they own none of it. The
// context is the LibTorch side's (device_context.h, through torch_side.h): made when a GPU's
// worker starts, and for the CPU when a model first uses it (never, for a built-in resampler).
//
// Why a lasting thread: LibTorch keeps GPU state per thread: cuDNN's tuned execution plans
// (`cudnn_benchmark`) are cached thread-locally, and so are the cuDNN/cuBLAS handles and the
// current stream. A session called from whichever flow-graph thread happens to be free would
// tune every convolution shape again on each new thread (measured on an H200: a 1080p
// decode_latents job ran its model stage at half the decode-only speed). So a pipeline runs its
// sessions on device_worker(device, lane), which lives as long as the process: a batch of jobs
// tunes each shape once.
//
// On its thread the worker's device is the current device and its compute stream (one per
// worker: lanes of one GPU compute on streams of their own) the current stream, for every call.
// Calls run one at a time, in the order they came. Torch-free header (the scheduler includes it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "parallel/model_thread.h"
#include "src/model.h"

namespace wm::parallel {

// What a worker did since it was made (process-wide counters, for reports).
struct WorkerStats {
  double busy_seconds = 0;  // inside calls
  int64_t calls = 0;
  int64_t frames = 0;  // output frames its calls made (add_frames; a band or a tile counts once)
  double peak_memory_mib = -1;  // CUDA: the allocator's peak on the device; -1 on the CPU
};

class DeviceWorker {
 public:
  DeviceWorker(const Device& device, int lane);
  ~DeviceWorker();  // finishes the queued calls, then joins
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  const Device& device() const { return device_; }
  int lane() const { return lane_; }
  // The worker as the models see it (for RunContext::device); valid as long as the worker.
  exec::DeviceContext* context();

  // Runs `f` on the worker's thread and waits; returns its result or rethrows what it threw.
  // Called from the worker's own thread, runs `f` inline.
  template <typename F>
  auto call(F&& f) -> std::invoke_result_t<F&> {
    return thread_.call([this, &f]() -> std::invoke_result_t<F&> {
      const Timer timer(*this);
      return f();
    });
  }
  // call(), not counted in stats(): the worker's own housekeeping (pinning a CPU rank's threads),
  // not a model's work.
  template <typename F>
  auto call_uncounted(F&& f) -> std::invoke_result_t<F&> {
    return thread_.call([&f]() -> std::invoke_result_t<F&> { return f(); });
  }
  // Queues `f` on the worker's thread and returns at once; the future gives its result.
  template <typename F>
  auto submit(F f) -> std::future<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    return thread_.submit([this, f = std::move(f)]() mutable -> R {
      const Timer timer(*this);
      return f();
    });
  }

  WorkerStats stats() const;
  // Counts output frames made on this worker (the caller knows what a call made: once per slice
  // and rank, not per tile).
  void add_frames(int64_t n) { frames_ += n; }

 private:
  struct Timer {
    explicit Timer(DeviceWorker& w) : worker(w), start(std::chrono::steady_clock::now()) {}
    ~Timer() {
      worker.busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      ++worker.calls_;
    }
    DeviceWorker& worker;
    std::chrono::steady_clock::time_point start;
  };
  struct Impl;  // the DeviceContext: streams, staging, offload (device_worker.cpp)

  Device device_;
  int lane_;
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> frames_{0};
  std::unique_ptr<Impl> impl_;
  ModelThread thread_;  // last member: joined first, while impl_ still stands
};

// The process-wide worker for lane `lane` of `device` (thread "cpu<lane>" / "gpu<i>.<lane>"),
// made on first use and never destroyed (it may hold CUDA handles that must not be torn down
// after main returns).
DeviceWorker& device_worker(const Device& device, int lane = 0);

}  // namespace wm::parallel
