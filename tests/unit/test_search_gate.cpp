// The search gate (src/exec/search_gate.h): a convolution shape a thread runs for the first time
// (cuDNN times its plans then) holds its device alone; later calls share it. What the ranks and
// lanes sharing a device rely on: a search waits for the shared passes standing and keeps new
// ones out until it is done, a waiting search goes before shared passes asked later, shared passes
// stand together, devices do not wait for each other, and "first time" is per thread.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "src/exec/search_gate.h"

namespace wm::exec {
namespace {

// Waits until `n` threads wait at `device`'s gate (no time bound: a broken gate fails the
// assertions after it, or hangs the test under ctest's timeout).
void until_waiting(int device, int n) {
  while (search_gate_waiting(device) < n) std::this_thread::yield();
}

// A thread that passes `shape` once (alone: its first time), then, once go() is called, asks for
// it again (shared) and holds that pass until release().
class Holder {
 public:
  Holder(int device, uint64_t shape) {
    thread_ =
        std::thread([this, device, shape, go = go_.get_future(), release = release_.get_future()] {
          {
            const SearchPass first = search_gate(device, shape);
            EXPECT_TRUE(first.alone());
          }
          primed_ = true;
          go.wait();
          const SearchPass pass = search_gate(device, shape);
          EXPECT_FALSE(pass.alone());
          passed_ = true;
          release.wait();
        });
    while (!primed_) std::this_thread::yield();
  }
  ~Holder() {
    if (!went_) go();
    if (!released_) release();
    thread_.join();
  }
  void go() {
    went_ = true;
    go_.set_value();
  }
  void release() {
    released_ = true;
    release_.set_value();
  }
  bool passed() const { return passed_; }

 private:
  std::promise<void> go_, release_;
  bool went_ = false, released_ = false;
  std::atomic<bool> primed_{false}, passed_{false};
  std::thread thread_;
};

TEST(SearchGate, FirstPassOfAShapeIsAlonePerThread) {
  const int device = 101;
  const int64_t alone_before = search_gate_alone_passes();
  {
    const SearchPass first = search_gate(device, 7);
    EXPECT_TRUE(first.held());
    EXPECT_TRUE(first.alone());
  }
  {
    const SearchPass again = search_gate(device, 7);
    EXPECT_TRUE(again.held());
    EXPECT_FALSE(again.alone());
    const SearchPass other_device = search_gate(device + 1, 7);  // another gate, not waited for
    EXPECT_TRUE(other_device.alone());
  }
  bool alone_elsewhere = false;
  std::thread([&] { alone_elsewhere = search_gate(device, 7).alone(); }).join();
  EXPECT_TRUE(alone_elsewhere);
  EXPECT_FALSE(SearchPass().held());
  // Alone: shape 7 here, on the other device, and on the other thread.
  EXPECT_EQ(search_gate_alone_passes() - alone_before, 3);
}

TEST(SearchGate, SharedPassesStandTogether) {
  const int device = 103;
  Holder a(device, 1), b(device, 2);
  a.go();
  b.go();
  while (!a.passed() || !b.passed()) std::this_thread::yield();  // both stand at once
  a.release();
  b.release();
}

TEST(SearchGate, ASearchWaitsForSharedPassesAndSharedPassesWaitForIt) {
  const int device = 104;
  Holder holder(device, 1), late(device, 3);
  holder.go();
  while (!holder.passed()) std::this_thread::yield();

  // A new shape waits while the shared pass stands.
  std::atomic<bool> searched{false};
  std::promise<void> end_search;
  std::thread searcher([&searched, device, ended = end_search.get_future()] {
    const SearchPass pass = search_gate(device, 2);
    EXPECT_TRUE(pass.alone());
    searched = true;
    ended.wait();
  });
  until_waiting(device, 1);
  EXPECT_FALSE(searched);

  // A shared pass asked now waits behind the waiting search (which is not starved).
  late.go();
  until_waiting(device, 2);
  EXPECT_FALSE(late.passed());
  holder.release();
  while (!searched) std::this_thread::yield();
  EXPECT_FALSE(late.passed());  // the search stands alone
  EXPECT_EQ(search_gate_waiting(device), 1);
  end_search.set_value();
  searcher.join();
  while (!late.passed()) std::this_thread::yield();
  late.release();
  EXPECT_EQ(search_gate_waiting(device), 0);
}

TEST(SearchGate, MovedPassReleasesOnce) {
  const int device = 105;
  { const SearchPass first = search_gate(device, 9); }
  SearchPass a = search_gate(device, 9);
  SearchPass b = std::move(a);
  EXPECT_FALSE(a.held());
  EXPECT_TRUE(b.held());
  a = std::move(b);
  EXPECT_TRUE(a.held());
  a = SearchPass();
  // Released once: a search passes now.
  EXPECT_TRUE(search_gate(device, 10).alone());
}

}  // namespace
}  // namespace wm::exec
