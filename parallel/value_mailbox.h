// Small host values between the ranks of an exchange group (exec::HaloExchange::send_values):
// the ranks of both exchanges are threads of this process, so a plan or a count goes host to
// host, queued per (sender, receiver) pair, instead of through device memory and back (a
// device-to-pageable copy waits for the stream: every rank that read a message that way drained
// its launch queue and left its GPU idle while it launched again). Mailbox<T> queues any
// movable message the same way. Torch-free, header-only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/base/error.h"

namespace wm::parallel {

template <typename T>
class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  void send(int from, int to, T values) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queues_[{from, to}].push_back(std::move(values));
    }
    arrived_.notify_all();
  }

  // The next values from `from` to `to`; nullopt when `deadline` passed first. `failure()` (the
  // group's failure text, "" while none; called without the group's locks held by us) is polled
  // while waiting: a failed run throws wm::Error naming rank `to` and the cause.
  std::optional<T> recv(int from, int to, Clock::time_point deadline,
                        const std::function<std::string()>& failure) {
    std::unique_lock<std::mutex> lock(mutex_);
    std::deque<T>& q = queues_[{from, to}];
    for (;;) {
      if (!q.empty()) {
        T values = std::move(q.front());
        q.pop_front();
        return values;
      }
      const std::string why = failure();
      if (!why.empty()) {
        throw Error("halo exchange (rank " + std::to_string(to) + "): " + why, kExitFailure);
      }
      if (Clock::now() >= deadline) return std::nullopt;
      // Woken by a send, or at the latest in 50 ms to look at the group's failure again.
      arrived_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
    }
  }

  // Wakes every waiting recv (after the group failed).
  void wake() { arrived_.notify_all(); }
  // Forgets undelivered values (a new run).
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    queues_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::pair<int, int>, std::deque<T>> queues_;
};

using ValueMailbox = Mailbox<std::vector<int64_t>>;

}  // namespace wm::parallel
