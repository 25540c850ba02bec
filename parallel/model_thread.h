// A long-lived thread that runs calls one at a time, in the order they came: call() runs a
// function on the thread and waits, submit() queues it and returns a future. The thread of a
// device worker (device_worker.h, which says why sessions need lasting threads).
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
  // Queues `f`; the future gives its result or its exception. (Waiting on it from this thread
  // itself would deadlock.)
  template <typename F>
  auto submit(F&& f) -> std::future<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> done = task->get_future();
    post([task] { (*task)(); });
    return done;
  }

 private:
  struct Impl;
  bool on_this_thread() const;
  void post(std::function<void()> task);
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::parallel
