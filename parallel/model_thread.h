// Long-lived threads that model sessions run on: call() runs a function on the thread and waits.
//
// LibTorch keeps GPU state per thread: cuDNN's tuned execution plans (`cudnn_benchmark`) are
// cached thread-locally, and so are the cuDNN/cuBLAS handles and the current stream. A session
// called from whichever flow-graph thread happens to be free would tune every convolution shape
// again on each new thread (measured on an H200: a 1080p decode_latents job ran its model stage at
// half the decode-only speed). So the pipeline runs its i-th session on model_thread(i), which
// lives as long as the process: a batch of jobs tunes each shape once.
//
// Calls on one thread run one at a time, in the order they came; a second pipeline running at the
// same time would share the threads (correct, but serialised).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <type_traits>

namespace wm::parallel {

class ModelThread {
 public:
  explicit ModelThread(const std::string& name);
  ~ModelThread();  // finishes the queued calls, then joins
  ModelThread(const ModelThread&) = delete;
  ModelThread& operator=(const ModelThread&) = delete;

  // Runs `f` on this thread; returns its result, or rethrows what it threw. Blocks the caller.
  // Called from the thread itself, runs `f` inline (no deadlock).
  template <typename F>
  auto call(F&& f) -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    if (on_this_thread()) return f();
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> done = task->get_future();
    post([task] { (*task)(); });
    return done.get();
  }

 private:
  struct Impl;
  bool on_this_thread() const;
  void post(std::function<void()> task);
  std::unique_ptr<Impl> impl_;
};

// The process-wide thread for pipeline worker `index` (named "model<index>"), made on first use
// and never destroyed (it may hold CUDA handles that must not be torn down after main returns).
ModelThread& model_thread(int index);

}  // namespace wm::parallel
