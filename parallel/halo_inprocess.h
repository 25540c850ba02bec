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

#include "parallel/exchange_group.h"

namespace wm::parallel {

class InProcessGroup final : public ExchangeGroup {
 public:
  // `timeout`: the longest a recv waits before the group fails (a rank that never sends).
  explicit InProcessGroup(int ranks, std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~InProcessGroup() override;
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const override;
  // Starts a run with ranks [0, active): forgets undelivered messages and a past failure.
  // Call while no rank of the group is running.
  void begin(int active) override;
  // Rank r's view, valid until the group goes.
  exec::HaloExchange& rank(int r) override;
  // Fails the run: every waiting and later send/recv throws wm::Error("...: " + why).
  void abort(const std::string& why) override;
  bool failed() const override;
  ExchangeStats stats() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::parallel
