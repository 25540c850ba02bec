// A group of ranks that exchange halos (src/exec/halo_exchange.h): what a sequence-parallel
// session needs of an implementation (in-process: halo_inprocess.h; NCCL: halo_nccl.h).
// Torch-free header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wm::exec {
class HaloExchange;
}

namespace wm::parallel {

// What one rank of a group sent and waited for (over the group's life).
struct RankExchange {
  int64_t messages = 0;     // sent
  int64_t bytes = 0;        // sent
  double wait_seconds = 0;  // in recv, until its message was there (in-process; NCCL: 0, the
                            // device waits, not the host)
};

// What a group's exchange moved (over its life).
struct ExchangeStats {
  int64_t messages = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;          // ranks waiting in recv for their messages, summed (in-process)
  std::vector<RankExchange> ranks;  // per rank
};

class ExchangeGroup {
 public:
  virtual ~ExchangeGroup() = default;
  virtual int size() const = 0;
  // Starts a run with ranks [0, active); forgets a past failure. No rank may be running.
  virtual void begin(int active) = 0;
  // Rank r's view, valid as long as the group.
  virtual exec::HaloExchange& rank(int r) = 0;
  // Rank r's view for the time split's messages, which go one way around the ranks (r to r + 1,
  // the last rank to rank 0 for the next slice): a send there never holds the sender (NCCL: a
  // communicator per pair of ranks and a stream of its own for the sends, the last rank's
  // hand-off through memory; in-process sends never wait anyway), so a rank goes on while its
  // receiver is a layer or a slice behind. Messages between two ranks keep their order within
  // each view. Default: rank(r).
  virtual exec::HaloExchange& pipelined(int r) { return rank(r); }
  // Fails the run: every waiting and later send/recv throws (NCCL: the communicators are
  // aborted, so device work waiting on a peer ends).
  virtual void abort(const std::string& why) = 0;
  // True once the current run has failed (abort(), a timeout).
  virtual bool failed() const = 0;
  // An asynchronous failure of the exchange itself (NCCL: an error a communicator reports while
  // the ranks compute), as one line; empty when none. Polled by the session while it waits.
  virtual std::string health() { return {}; }
  virtual ExchangeStats stats() const = 0;
  // What carries the messages: "in-process" or "nccl" (reports say what ran, not what was asked).
  virtual const char* kind() const { return "in-process"; }
};

}  // namespace wm::parallel
