// Sequence-parallel execution of one causal model over several ranks (device workers): each
// slice's frames are split in time, rank r takes the r-th run of them, all ranks compute at
// once, and before each causal temporal convolution a rank receives from the rank before it the
// history that convolution needs (the halo exchange, src/exec/halo_exchange.h). The state at a
// slice's end passes from the last rank to rank 0 for the next slice; outputs are gathered in
// frame order. The result equals one session's (to rounding): the model does the exchange
// (ModelTraits::sequence_parallel), this session splits, runs and gathers.
//
// Split by rows instead (spatial parallelism, SequenceParallelOptions::by): rank r takes a band
// of the slice's rows, every frame; before each spatial convolution the model exchanges its
// bands' boundary rows with the ranks above and below, and its attention gathers every band's
// tokens (RunContext::halo_rows, ModelTraits::spatial_parallel). Each rank keeps its band's
// causal state, so slices chain with no hand-off; outputs are gathered top to bottom. Auto
// chooses per sequence (per tile), at its first slice (choose_split).
//
// Ranks with no frames of a slice (a slice shorter than the group) sit it out. A rank's failure
// aborts the exchange, so the others stop waiting, and run() rethrows the failing rank's error:
// the slice (and its input) fails; the state is dropped with it. A rank still running after
// SequenceParallelOptions::timeout aborts the exchange too (the error says which rank did not
// finish). Errors name the rank, its device and the slice on one line (rank_fault.h).
// Torch-free header.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/exchange_group.h"
#include "parallel/placed_session.h"
#include "src/model.h"

namespace wm::parallel {

// How a slice is split over the ranks.
enum class SplitBy {
  kTime,  // latent frames (sequence)
  kRows,  // bands of rows (spatial)
  kAuto,  // choose_split() at each sequence's first slice
};

// Auto's rule, for a sequence whose first slice has `frames` latent frames of `rows` rows on
// `ranks` ranks of device kind `kind`: rows when every rank gets at least 2 rows and either the
// slice has fewer frames than ranks (a time split would leave ranks idle: an image, a clip of a
// few frames) or the ranks are CPU ranks (measured never slower there); else time.
// docs/gpu.md ("Time split or height split") gives the measurements.
SplitBy choose_split(int frames, int rows, int ranks, Device::Kind kind);

struct SequenceParallelOptions {
  // Latent frames per rank of every slice (tests: uneven splits, a rank with only the first
  // frame); a slice with fewer frames fills the ranks in order, one with more gives the rest to
  // the last rank. Empty: even (split_frames).
  std::vector<int> split;
  SplitBy by = SplitBy::kTime;
  // Rows split: latent rows per rank (tests: uneven bands, a band of 1 row), filled like
  // `split`. Empty: nearly even (split_frames over the rows).
  std::vector<int> bands;
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
  // How the last slice run was split (kTime before any); slices run split by rows and in time.
  SplitBy last_split() const { return last_split_; }
  int64_t row_slices() const { return row_slices_; }
  int64_t time_slices() const { return time_slices_; }
  ExchangeStats exchange_stats() const { return group_->stats(); }

 private:
  std::vector<std::unique_ptr<ModelSession>> ranks_;
  std::vector<DeviceWorker*> workers_;
  SequenceParallelOptions options_;
  std::unique_ptr<ExchangeGroup> group_;
  std::map<int, SplitBy> chosen_;  // auto: per tile, the split its sequence's first slice chose
  SplitBy last_split_ = SplitBy::kTime;
  int64_t row_slices_ = 0, time_slices_ = 0;
};

}  // namespace wm::parallel
