// ModelThread and DeviceWorker (parallel/model_thread.h, parallel/device_worker.h): the lasting
// threads every model session runs on. What the pipeline relies on: calls run on one thread, one
// at a time, in the order they came; results and exceptions reach the caller; a call from the
// thread itself runs inline; the destructor finishes what was queued; a worker counts its calls,
// busy time and frames.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/model_thread.h"

namespace wm::parallel {
namespace {

std::string current_thread_name() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  return name;
}

TEST(ModelThread, CallsRunOnOneNamedThreadNotTheCaller) {
  ModelThread thread("wm-test-thread");
  std::set<std::thread::id> ids;
  for (int i = 0; i < 5; ++i) ids.insert(thread.call([] { return std::this_thread::get_id(); }));
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_NE(*ids.begin(), std::this_thread::get_id());
  EXPECT_EQ(thread.call([] { return current_thread_name(); }), "wm-test-thread");
}

TEST(ModelThread, NameIsCutToFifteenCharacters) {
  ModelThread thread("a-name-longer-than-fifteen");
  EXPECT_EQ(thread.call([] { return current_thread_name(); }), "a-name-longer-t");
}

TEST(ModelThread, SubmittedCallsRunInOrderOneAtATime) {
  ModelThread thread("wm-order");
  std::vector<int> order;
  std::atomic<int> inside{0}, most_inside{0};
  std::vector<std::future<int>> done;
  // Submitted from several caller threads at once: each caller's calls keep their order and
  // never two run together.
  std::mutex submit_mutex;
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int k = 0; k < 50; ++k) {
        std::lock_guard<std::mutex> lock(submit_mutex);
        done.push_back(thread.submit([&, value = c * 1000 + k] {
          const int now = ++inside;
          int seen = most_inside.load();
          while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
          }
          order.push_back(value);  // only this thread writes `order`
          --inside;
          return value;
        }));
      }
    });
  }
  for (auto& t : callers) t.join();
  for (auto& f : done) f.get();
  EXPECT_EQ(most_inside.load(), 1);
  ASSERT_EQ(order.size(), 200u);
  for (int c = 0; c < 4; ++c) {
    int last = -1;
    for (int v : order) {
      if (v / 1000 != c) continue;
      EXPECT_GT(v % 1000, last) << "caller " << c;
      last = v % 1000;
    }
    EXPECT_EQ(last, 49);
  }
}

TEST(ModelThread, ResultsAndExceptionsReachTheCaller) {
  ModelThread thread("wm-errors");
  EXPECT_EQ(thread.call([] { return 42; }), 42);
  EXPECT_THROW(thread.call([]() -> int { throw std::runtime_error("boom"); }), std::runtime_error);
  auto failed = thread.submit([]() -> int { throw std::invalid_argument("bad"); });
  EXPECT_THROW(failed.get(), std::invalid_argument);
  // The thread survives a throwing call.
  EXPECT_EQ(thread.call([] { return std::string("still here"); }), "still here");
}

TEST(ModelThread, CallFromItsOwnThreadRunsInline) {
  ModelThread thread("wm-inline");
  // Without the inline rule the inner call would wait for the outer one: a deadlock.
  const auto ids = thread.call([&] {
    const auto outer = std::this_thread::get_id();
    const auto inner = thread.call([] { return std::this_thread::get_id(); });
    return std::make_pair(outer, inner);
  });
  EXPECT_EQ(ids.first, ids.second);
}

TEST(ModelThread, DestructorFinishesQueuedCalls) {
  std::atomic<int> ran{0};
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  {
    ModelThread thread("wm-drain");
    // The first call holds the thread until the others are queued; none may be dropped.
    (void)thread.submit([&, gate] {
      gate.wait();
      ++ran;
    });
    for (int i = 0; i < 20; ++i) (void)thread.submit([&] { ++ran; });
    release.set_value();
  }
  EXPECT_EQ(ran.load(), 21);
}

TEST(DeviceWorker, CpuWorkerRunsCallsOnItsLaneThreadAndCountsThem) {
  const Device cpu{};
  DeviceWorker worker(cpu, 3);
  EXPECT_EQ(worker.lane(), 3);
  EXPECT_EQ(worker.device().str(), cpu.str());
  EXPECT_EQ(worker.call([] { return current_thread_name(); }), "cpu3");
  const WorkerStats before = worker.stats();
  EXPECT_EQ(before.calls, 1);
  auto slow = worker.submit([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return 7;
  });
  EXPECT_EQ(slow.get(), 7);
  EXPECT_THROW(worker.call([]() -> int { throw std::runtime_error("x"); }), std::runtime_error);
  worker.add_frames(5);
  worker.add_frames(2);
  const WorkerStats after = worker.stats();
  EXPECT_EQ(after.calls, 3);  // a throwing call counts too
  EXPECT_GE(after.busy_seconds - before.busy_seconds, 0.03);
  EXPECT_EQ(after.frames, 7);
  EXPECT_LT(after.peak_memory_mib, 0);  // no device memory on the CPU
}

TEST(DeviceWorker, ProcessWideWorkersAreOnePerDeviceAndLane) {
  const Device cpu{};
  DeviceWorker& a = device_worker(cpu, 0);
  DeviceWorker& b = device_worker(cpu, 0);
  DeviceWorker& c = device_worker(cpu, 1);
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  EXPECT_EQ(a.call([] { return current_thread_name(); }), "cpu0");
  EXPECT_EQ(c.call([] { return current_thread_name(); }), "cpu1");
  // Lanes run at once: a call blocked on lane 0 does not stop lane 1.
  std::promise<void> release;
  auto blocked = a.submit([f = release.get_future().share()] { f.wait(); });
  EXPECT_EQ(c.call([] { return 1; }), 1);
  release.set_value();
  blocked.get();
}

}  // namespace
}  // namespace wm::parallel
