// The in-process halo exchange: the ranks of a sequence-parallel group are threads of this
// process (device workers), on the CPU, on several streams of one GPU, or on several GPUs.
// A message is a copy of the sent tensor (made on the sender's current stream, CUDA), queued per
// (sender, receiver) pair; the receiver's stream waits for it before copying it out. Implements
// exec::HaloExchange (src/exec/halo_exchange.h). Torch-free header.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace wm::exec {
class HaloExchange;
}

namespace wm::parallel {

// What a group's exchange moved (over its life).
struct ExchangeStats {
  int64_t messages = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;  // ranks waiting in recv for their messages, summed
};

class InProcessGroup {
 public:
  // `timeout`: the longest a recv waits before the group fails (a rank that never sends).
  explicit InProcessGroup(int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const;
  // Starts a run with ranks [0, active): forgets undelivered messages and a past failure.
  // Call while no rank of the group is running.
  void begin(int active);
  // Rank r's view, valid until the group goes.
  exec::HaloExchange& rank(int r);
  // Fails the run: every waiting and later send/recv throws wm::Error("...: " + why).
  void abort(const std::string& why);
  ExchangeStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::parallel
