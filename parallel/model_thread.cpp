#include "parallel/model_thread.h"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace wm::parallel {

struct ModelThread::Impl {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  bool stop = false;
  std::thread thread;

  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and nothing left
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();  // a packaged_task: its exception goes to the caller's future
    }
  }
};

ModelThread::ModelThread(const std::string& name) : impl_(std::make_unique<Impl>()) {
  impl_->thread = std::thread([this] { impl_->loop(); });
  // Shown by top -H and debuggers; Linux allows 15 characters.
  pthread_setname_np(impl_->thread.native_handle(), name.substr(0, 15).c_str());
}

ModelThread::~ModelThread() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_one();
  impl_->thread.join();
}

bool ModelThread::on_this_thread() const {
  return std::this_thread::get_id() == impl_->thread.get_id();
}

void ModelThread::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.push_back(std::move(task));
  }
  impl_->wake.notify_one();
}

}  // namespace wm::parallel
