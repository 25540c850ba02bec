// Sequence-parallel execution of one causal model over several ranks (device workers): each
// slice's frames are split in time, rank r takes the r-th run of them, all ranks compute at
// once, and before each causal temporal convolution a rank receives from the rank before it the
// history that convolution needs (the halo exchange, src/exec/halo_exchange.h). The state at a
// slice's end passes from the last rank to rank 0 for the next slice; outputs are gathered in
// frame order. The result equals one session's (to rounding): the model does the exchange
// (ModelTraits::sequence_parallel), this session splits, runs and gathers.
//
// Ranks with no frames of a slice (a slice shorter than the group) sit it out. A rank's failure
// aborts the exchange, so the others stop waiting, and run() rethrows the failing rank's error:
// the slice (and its input) fails; the state is dropped with it. A rank still running after
// SequenceParallelOptions::timeout aborts the exchange too (the error says which rank did not
// finish). Errors name the rank, its device and the slice on one line (rank_fault.h).
// Torch-free header.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/exchange_group.h"
#include "parallel/placed_session.h"
#include "src/model.h"

namespace wm::parallel {

struct SequenceParallelOptions {
  // Latent frames per rank of every slice (tests: uneven splits, a rank with only the first
  // frame); a slice with fewer frames fills the ranks in order, one with more gives the rest to
  // the last rank. Empty: even (split_frames).
  std::vector<int> split;
  // The longest a rank may take over its part of a slice (and an in-process recv may wait);
  // past it the exchange is aborted and the slice fails.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The exchange: NCCL (one rank per GPU, halo_nccl.h; the build needs WMBATCH_WITH_NCCL), or
  // in-process (threads as ranks: CPU, several ranks on one GPU, or several GPUs).
  bool nccl = false;
  // The job's rank number of rank 0 (several inputs in flight: each input lane's session has
  // ranks of its own), for errors and the fault injection.
  int first_rank = 0;
  // The job's test-only fault injection (rank_fault.h; not owned, outlives the session), or null.
  Fault* fault = nullptr;
};

// `frames` in at most `ranks` runs of nearly equal length, the longer runs last (rank 0 also
// yields the sequence's first output frame alone). Never a run of 0.
std::vector<int> split_frames(int frames, int ranks);

class SequenceParallelSession final : public PlacedSession {
 public:
  // Rank r runs `ranks[r]` on `workers[r]` (not owned; they outlive the session).
  SequenceParallelSession(std::vector<std::unique_ptr<ModelSession>> ranks,
                          std::vector<DeviceWorker*> workers, SequenceParallelOptions options = {});
  ~SequenceParallelSession() override;

  // Runs the slice on the ranks and returns the outputs in frame order. May be called from any
  // thread (the ranks run on their workers); ctx.device and ctx.halo are filled per rank.
  Planar run(Planar&& input, const RunContext& ctx) override;

  int ranks() const { return int(ranks_.size()); }
  ExchangeStats exchange_stats() const { return group_->stats(); }

 private:
  std::vector<std::unique_ptr<ModelSession>> ranks_;
  std::vector<DeviceWorker*> workers_;
  SequenceParallelOptions options_;
  std::unique_ptr<ExchangeGroup> group_;
};

}  // namespace wm::parallel
