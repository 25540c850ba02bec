// The device layer's memory budgets (parallel/memory_budget.h): one host budget for the process,
// measured once, that sessions hold shares of and release; what a session sees while another
// holds a share; the same budget seen through two device workers' contexts (two lanes).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/memory_budget.h"
#include "src/exec/device_context.h"

using wm::parallel::MemoryPool;

namespace {
constexpr int64_t kMiB = int64_t(1) << 20;
}  // namespace

// Two sessions, one budget: a share one session holds is what the other no longer sees; the
// holder still sees the whole budget less the others' shares; a resize moves both; dropping the
// share gives it back.
TEST(MemoryBudget, TwoSessionsShareOneBudget) {
  MemoryPool pool([] { return 1000 * kMiB; });
  EXPECT_EQ(pool.available(), 1000 * kMiB);
  std::unique_ptr<wm::exec::MemoryHold> a = pool.hold(300 * kMiB);
  EXPECT_EQ(a->bytes(), 300 * kMiB);
  EXPECT_EQ(pool.held(), 300 * kMiB);
  EXPECT_EQ(pool.available(), 700 * kMiB);          // session b, holding nothing
  EXPECT_EQ(pool.available(a.get()), 1000 * kMiB);  // session a: its own share is its to plan
  std::unique_ptr<wm::exec::MemoryHold> b = pool.hold(0);
  b->resize(200 * kMiB);
  EXPECT_EQ(pool.available(a.get()), 800 * kMiB);
  EXPECT_EQ(pool.available(b.get()), 700 * kMiB);
  a->resize(500 * kMiB);
  EXPECT_EQ(pool.available(b.get()), 500 * kMiB);
  EXPECT_EQ(pool.held(), 700 * kMiB);
  a.reset();  // session a ends
  EXPECT_EQ(pool.held(), 200 * kMiB);
  EXPECT_EQ(pool.available(b.get()), 1000 * kMiB);
  EXPECT_EQ(pool.available(), 800 * kMiB);
  b.reset();
  EXPECT_EQ(pool.held(), 0);
}

// Shares account, they do not allocate: together they may pass the budget, and then a session
// holding nothing sees none of it (<= 0), never a wrapped-around number.
TEST(MemoryBudget, SharesBeyondTheBudgetLeaveNothing) {
  MemoryPool pool([] { return 100 * kMiB; });
  auto a = pool.hold(80 * kMiB);
  auto b = pool.hold(50 * kMiB);
  EXPECT_EQ(pool.available(), -30 * kMiB);
  EXPECT_EQ(pool.available(b.get()), 20 * kMiB);
}

// The capacity is measured once, whoever asks and from however many threads; a set capacity
// replaces it; setting 0 measures again on the next ask.
TEST(MemoryBudget, MeasuredOnceWhateverAsks) {
  std::atomic<int> measured{0};
  MemoryPool pool([&] {
    ++measured;
    return 64 * kMiB + measured * kMiB;  // a different answer each time it is asked
  });
  std::vector<std::thread> sessions;
  std::vector<int64_t> seen(8);
  for (size_t i = 0; i < seen.size(); ++i) {
    sessions.emplace_back([&, i] {
      auto share = pool.hold(kMiB);
      // The other sessions' shares come and go while this one asks: what it sees is the one
      // measured budget less at most the seven others' shares, never a second measurement.
      seen[i] = pool.available(share.get());
    });
  }
  for (std::thread& t : sessions) t.join();
  EXPECT_EQ(measured.load(), 1);
  for (int64_t s : seen) {
    EXPECT_LE(s, 65 * kMiB);
    EXPECT_GE(s, 65 * kMiB - 7 * kMiB);
  }
  EXPECT_EQ(pool.held(), 0);
  EXPECT_EQ(pool.available(), 65 * kMiB);
  EXPECT_EQ(pool.capacity(), 65 * kMiB);
  pool.set_capacity(10 * kMiB);
  EXPECT_EQ(pool.capacity(), 10 * kMiB);
  EXPECT_EQ(measured.load(), 1);
  pool.set_capacity(0);
  EXPECT_EQ(pool.capacity(), 66 * kMiB);
  EXPECT_EQ(measured.load(), 2);
}

// The process's host budget is read once: after this process takes (and touches) 256 MiB more of
// the host's memory, the budget a session sees is unchanged; it is within what the host had.
TEST(MemoryBudget, HostBudgetReadOnce) {
  MemoryPool& host = wm::parallel::host_memory();
  host.set_capacity(0);
  const int64_t before = wm::parallel::host_available_memory();
  const int64_t budget = host.capacity();
  EXPECT_GE(budget, 1);
  EXPECT_LE(budget, before);
  std::vector<char> taken(size_t(256 * kMiB));
  std::memset(taken.data(), 1, taken.size());
  EXPECT_EQ(host.capacity(), budget);
  EXPECT_EQ(host.available(), budget - host.held());
  EXPECT_EQ(&wm::parallel::host_memory(), &host);
}

// Two lanes of one device are two device workers with two contexts; both ask the one host budget:
// what one lane's session holds, the other's sees gone, until it is released. A CPU context's
// device cap is 0 (no limit) and its host tensors are plain.
TEST(MemoryBudget, LanesShareTheHostBudget) {
  MemoryPool& host = wm::parallel::host_memory();
  host.set_capacity(4096 * kMiB);
  const wm::Device cpu;
  wm::exec::DeviceContext& lane0 = *wm::parallel::device_worker(cpu, 0).context();
  wm::exec::DeviceContext& lane1 = *wm::parallel::device_worker(cpu, 1).context();
  EXPECT_NE(&lane0, &lane1);
  EXPECT_EQ(lane1.host_memory_available(nullptr), 4096 * kMiB);
  {
    std::unique_ptr<wm::exec::MemoryHold> share = lane0.hold_host_memory(1024 * kMiB);
    EXPECT_EQ(lane1.host_memory_available(nullptr), 3072 * kMiB);
    EXPECT_EQ(lane0.host_memory_available(share.get()), 4096 * kMiB);
    share->resize(3000 * kMiB);
    EXPECT_EQ(lane1.host_memory_available(nullptr), 1096 * kMiB);
  }
  EXPECT_EQ(lane1.host_memory_available(nullptr), 4096 * kMiB);
  // A direct call's context (no worker) sees the same budget.
  wm::exec::DeviceContext& direct = wm::exec::device_layer().direct_context(at::Device(at::kCPU));
  auto share = lane1.hold_host_memory(96 * kMiB);
  EXPECT_EQ(direct.host_memory_available(nullptr), 4000 * kMiB);
  share.reset();
  EXPECT_EQ(lane0.device_memory_cap(), 0);
  const at::Tensor like = at::zeros({2, 3, 4});
  const at::Tensor h = lane0.host_empty_like(like, at::MemoryFormat::Preserve);
  EXPECT_EQ(h.sizes(), like.sizes());
  EXPECT_FALSE(h.is_pinned());
  host.set_capacity(0);
}
