// A group of ranks that exchange halos (src/exec/halo_exchange.h): what a sequence-parallel
// session needs of an implementation (in-process: halo_inprocess.h; NCCL: halo_nccl.h).
// Torch-free header.
#pragma once

#include <cstdint>
#include <string>

namespace wm::exec {
class HaloExchange;
}

namespace wm::parallel {

// What a group's exchange moved (over its life).
struct ExchangeStats {
  int64_t messages = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;  // ranks waiting in recv for their messages, summed (in-process)
};

class ExchangeGroup {
 public:
  virtual ~ExchangeGroup() = default;
  virtual int size() const = 0;
  // Starts a run with ranks [0, active); forgets a past failure. No rank may be running.
  virtual void begin(int active) = 0;
  // Rank r's view, valid as long as the group.
  virtual exec::HaloExchange& rank(int r) = 0;
  // Fails the run: every waiting and later send/recv throws (NCCL: the communicators are
  // aborted, so device work waiting on a peer ends).
  virtual void abort(const std::string& why) = 0;
  // True once the current run has failed (abort(), a timeout).
  virtual bool failed() const = 0;
  // An asynchronous failure of the exchange itself (NCCL: an error a communicator reports while
  // the ranks compute), as one line; empty when none. Polled by the session while it waits.
  virtual std::string health() { return {}; }
  virtual ExchangeStats stats() const = 0;
};

}  // namespace wm::parallel
