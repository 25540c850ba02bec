// Mailbox<T> (parallel/value_mailbox.h): host messages between the ranks of an exchange group —
// the tail plans of both exchanges. What the ranks rely on: messages of one pair arrive in the
// order sent and apart from other pairs', a receive waits for a later send, a missed deadline is
// told apart from a message, the group's failure ends a waiting receive with an error naming the
// rank, and a new run starts with nothing undelivered.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/value_mailbox.h"
#include "src/base/error.h"

namespace wm::parallel {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const auto kNoFailure = [] { return std::string(); };

TEST(Mailbox, PairsKeepTheirOrderApartFromEachOther) {
  ValueMailbox box;
  box.send(0, 1, {1});
  box.send(2, 1, {20});
  box.send(0, 1, {2, 3});
  box.send(1, 0, {10});
  const Clock::time_point soon = Clock::now() + 1s;
  EXPECT_EQ(box.recv(0, 1, soon, kNoFailure), (std::vector<int64_t>{1}));
  EXPECT_EQ(box.recv(0, 1, soon, kNoFailure), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(box.recv(2, 1, soon, kNoFailure), (std::vector<int64_t>{20}));
  EXPECT_EQ(box.recv(1, 0, soon, kNoFailure), (std::vector<int64_t>{10}));
}

TEST(Mailbox, ReceiveWaitsForALaterSend) {
  // Move-only messages: moved in and out, never copied.
  Mailbox<std::unique_ptr<int>> box;
  std::thread sender([&] {
    std::this_thread::sleep_for(50ms);
    box.send(3, 0, std::make_unique<int>(42));
  });
  std::optional<std::unique_ptr<int>> got = box.recv(3, 0, Clock::now() + 30s, kNoFailure);
  sender.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(*got);
  EXPECT_EQ(**got, 42);
}

TEST(Mailbox, DeadlinePassedIsNoMessage) {
  ValueMailbox box;
  box.send(0, 1, {7});  // another pair's message does not answer this receive
  EXPECT_FALSE(box.recv(1, 0, Clock::now() + 20ms, kNoFailure).has_value());
  EXPECT_FALSE(box.recv(1, 0, Clock::now() - 1s, kNoFailure).has_value());
  // A message already there is taken even past the deadline.
  EXPECT_EQ(box.recv(0, 1, Clock::now() - 1s, kNoFailure), (std::vector<int64_t>{7}));
}

TEST(Mailbox, GroupFailureEndsAWaitingReceive) {
  ValueMailbox box;
  std::atomic<bool> failed{false};
  std::thread failing([&] {
    std::this_thread::sleep_for(50ms);
    failed = true;
    box.wake();
  });
  try {
    box.recv(0, 2, Clock::now() + 30s, [&] {
      return failed ? std::string("rank 0 failed: out of device memory") : std::string();
    });
    ADD_FAILURE() << "the receive returned after the group failed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 failed: out of device memory"), std::string::npos) << what;
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
  failing.join();
}

TEST(Mailbox, ClearForgetsUndeliveredMessages) {
  ValueMailbox box;
  box.send(0, 1, {1});
  box.send(1, 2, {2});
  box.clear();
  EXPECT_FALSE(box.recv(0, 1, Clock::now(), kNoFailure).has_value());
  EXPECT_FALSE(box.recv(1, 2, Clock::now(), kNoFailure).has_value());
  box.send(0, 1, {3});
  EXPECT_EQ(box.recv(0, 1, Clock::now(), kNoFailure), (std::vector<int64_t>{3}));
}

}  // namespace
}  // namespace wm::parallel
