// Rank failures: what a rank's error becomes (one line naming the rank, its device and the slice;
// an exit code), and the test-only fault injection that makes a real rank fail at a real point.
//
// Fault injection (the job's hidden `parallel: {fault: "rank1:slice2:oom"}`, docs/gpu.md,
// "Failures"): `rank<R>:slice<S>:<kind>` makes rank R (the job's rank number: with several
// inputs in flight, the input lanes' ranks count on) fail the first time it runs a slice with
// index >= S, once per job (one input fails, the next ones run). Kinds:
//   oom    throws c10::OutOfMemoryError (what the CUDA allocator throws);
//   error  throws c10::Error ("CUDA error: an illegal memory access ..."-like);
//   hang   stops answering: blocks until the exchange is aborted (a peer's receive timing out,
//          or the session's timeout), and then its exchange call fails with the group's
//          failure like its peers' (the cause reported is the timeout); without an exchange,
//          blocks for the timeout and throws c10::Error "stopped answering".
// A sequence-parallel rank fails inside its model, at its first halo send or receive of that
// slice (mid-decode: its peers wait on it); a data-parallel rank at the start of the slice's call.
// Torch-free header.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "src/model.h"

namespace wm::exec {
class HaloExchange;
}

namespace wm::parallel {

class ExchangeGroup;

struct FaultSpec {
  enum class Kind { kNone, kOom, kError, kHang } kind = Kind::kNone;
  int rank = 0;
  int64_t slice = 0;
  bool armed() const { return kind != Kind::kNone; }
};

// Parses "rank<R>:slice<S>:<oom|error|hang>"; "" is no fault. Throws std::invalid_argument with
// the problem.
FaultSpec parse_fault(const std::string& text);

// One job's fault: fires once (shared by the job's sessions, across inputs and input lanes).
class Fault {
 public:
  explicit Fault(FaultSpec spec) : spec_(spec) {}
  // True (once) when rank `rank` running slice `slice` is the fault's point.
  bool fires(int rank, int64_t slice);
  // Throws the fault's error for `rank` (hang: waits until `group` fails or `timeout` passes).
  [[noreturn]] void raise(int rank, int64_t slice, const ExchangeGroup* group,
                          std::chrono::milliseconds timeout) const;
  // A hang inside an exchange: returns once `group` failed (the call that follows fails with the
  // group's error, as the peers' calls do); raises the hang's own error if the group has not
  // failed well after `timeout` (the peers' waits and the session's end after `timeout`).
  void hang(int rank, int64_t slice, const ExchangeGroup& group,
            std::chrono::milliseconds timeout) const;
  const FaultSpec& spec() const { return spec_; }

 private:
  FaultSpec spec_;
  std::atomic<bool> fired_{false};
};

// Rank `rank`'s halo exchange with the fault armed: its first send or recv of the slice raises.
// Valid as long as `inner`, `group` and `fault`.
std::unique_ptr<exec::HaloExchange> faulty_exchange(exec::HaloExchange& inner, Fault& fault,
                                                    int rank, int64_t slice,
                                                    const ExchangeGroup& group,
                                                    std::chrono::milliseconds timeout);

// Rethrows `failure` (thrown by rank `rank` on `device` in slice `slice`) as one line: LibTorch's
// out-of-memory error as ModelError "rank 1 (cuda:1), slice 2: out of device memory: <what>"
// (exit 1: a retry with more free memory may pass), other LibTorch/CUDA/NCCL errors as
// "rank 1 (cuda:1), slice 2: <what>" (exit 1), a ModelError with the same prefix and its own exit
// code, other wm::Errors (Cancelled, InputError) unchanged. `name_rank` false (a job of one
// rank): no "rank …" prefix.
[[noreturn]] void rethrow_rank_failure(std::exception_ptr failure, int rank, const Device& device,
                                       int64_t slice, bool name_rank = true);

}  // namespace wm::parallel
