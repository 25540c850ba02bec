// Sequence-parallel execution of one causal model over several ranks (device workers): each
// slice's frames are split in time, rank r takes the r-th run of them, and the ranks form a
// ring (exec::HaloExchange::history_from/history_to): before each causal temporal convolution a
// rank receives from the rank before it the history that convolution needs, and hands its own
// new history on as soon as it exists; the last rank hands it to rank 0 for the sequence's next
// slice, layer by layer. There is no barrier at a slice's end: run() returns once the slice is
// queued on the ranks (the output comes through RunContext::deferred when the caller takes it
// that way), so rank 0 starts slice k + 1 while later ranks still finish slice k. At most two
// slices per tile are in flight. The ranks write their parts straight into the slice's output
// (RunContext::into), which the caller takes in slice order. The result equals one session's
// (to rounding): the model does the exchange (ModelTraits::sequence_parallel), this session
// splits, runs and gathers.
//
// Split by rows instead (spatial parallelism, SequenceParallelOptions::by): rank r takes a band
// of the slice's rows, every frame; before each spatial convolution the model exchanges its
// bands' boundary rows with the ranks above and below, and its attention gathers every band's
// tokens (RunContext::halo_rows, ModelTraits::spatial_parallel). Each rank keeps its band's
// causal state, so slices chain with no hand-off; outputs land top to bottom. Auto chooses per
// sequence (per tile), at its first slice (choose_split).
//
// Ranks with no frames of a slice (a slice shorter than the group) sit it out. A rank's failure
// aborts the exchange, so the others stop waiting, and taking that slice's output rethrows the
// failing rank's error: the slice (and its input) fails; the sequence cannot go on (a later
// slice of it fails at once; a sequence's first slice starts a fresh exchange). A rank still
// running after SequenceParallelOptions::timeout aborts the exchange too (the error says which
// rank did not finish). Errors name the rank, its device and the slice on one line
// (rank_fault.h).
// Torch-free header.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/exchange_group.h"
#include "parallel/placed_session.h"
#include "parallel/scaling_model.h"
#include "src/model.h"

namespace wm::parallel {

// How a slice is split over the ranks.
enum class SplitBy {
  kTime,  // latent frames (sequence)
  kRows,  // bands of rows (spatial)
  kAuto,  // choose_split() at each sequence's first slice
};

// Auto's fixed rule, for a model that gives no split costs (auto otherwise predicts both splits:
// predict_split in scaling_model.h), for a sequence whose first slice has `frames` latent frames
// of `rows` rows on `ranks` ranks of device kind `kind`: rows when every rank gets at least 2
// rows and either the slice has fewer frames than ranks (a time split would leave ranks idle:
// an image, a clip of a few frames) or the ranks are CPU ranks; else time.
// docs/gpu.md ("Time split or height split") gives the measurements.
SplitBy choose_split(int frames, int rows, int ranks, Device::Kind kind);

// The output of a slice of `frames` × `height` × `width` input (`first`: it holds the sequence's
// frame 0): channels, frames, height, width.
struct SliceShape {
  int channels = 0, frames = 0, height = 0, width = 0;
};
using OutputShape = std::function<SliceShape(int frames, int height, int width, bool first)>;

struct SequenceParallelOptions {
  // Latent frames per rank of every slice (tests: uneven splits, a rank with only the first
  // frame); a slice with fewer frames fills the ranks in order, one with more gives the rest to
  // the last rank. Empty: even (split_frames). With frame_group g > 1: groups of g input frames
  // (rank 0 of a sequence's first slice holds frame_offset more).
  std::vector<int> split;
  SplitBy by = SplitBy::kTime;
  // Rows split: latent rows per rank (tests: uneven bands, a band of 1 row), filled like
  // `split`. Empty: nearly even (split_frames over the rows).
  std::vector<int> bands;
  // The longest a rank may take over its part of a slice (from the slice's start; and an
  // in-process recv may wait); past it the exchange is aborted and the slice fails.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The exchange: NCCL (one rank per GPU, halo_nccl.h; the build needs WMBATCH_WITH_NCCL), or
  // in-process (threads as ranks: CPU, several ranks on one GPU, or several GPUs).
  bool nccl = false;
  // The job's rank number of rank 0 (several inputs in flight: each input lane's session has
  // ranks of its own), for errors and the fault injection.
  int first_rank = 0;
  // The job's test-only fault injection (rank_fault.h; not owned, outlives the session), or null.
  Fault* fault = nullptr;
  // The model's output per slice (fit_to_model sets it): with it the session makes each
  // slice's output once and the ranks write their parts into it; without it the ranks return
  // their parts and the session copies them together.
  OutputShape output_shape;
  // Input frames come in groups of frame_group (+ frame_offset in a sequence's first slice): a
  // time split keeps groups whole (an encoder's temporal downsampling windows).
  int frame_group = 1;
  int frame_offset = 0;
  // Every rank takes the whole slice and splits it inside (ModelTraits::split_inside_slices):
  // its ring runs r − 1 → r within each slice (no history between slices), and the session
  // puts the ranks' outputs together in rank order.
  bool inside = false;
  // Time split: each slice whole to one rank, the sequence's slices in turn (slice k to rank
  // k mod P), instead of a run of every slice to every rank. The ring stays: a slice's layers
  // take their history from the rank that ran the slice before, layer by layer, so rank r + 1
  // runs slice k + 1 one layer behind rank r on slice k, and each rank runs one device's
  // convolution shapes. Measured (docs/gpu.md, stop 46), it pays only where ranks share a device
  // (two ranks on one H200, 720p: 0.876× → 0.918× of one rank); on GPUs of their own and on CPU
  // ranks it loses (1.72× against 1.85×; 1.51× against 1.70×): a rank has whole slices, not a
  // share of each, so the slices' count bounds the balance. The caller keeps up to P slices in
  // flight (RunContext::deferred) to keep P ranks busy.
  bool whole_slices = false;
  // Measurement (wmbench's scaling model): the ranks of each slice run one after another, each
  // alone on its device, and run() returns when the slice is done; rank_seconds() then holds
  // each rank's compute time. Same results.
  bool serial = false;
  // CPU ranks (every worker on the CPU): each rank's thread and its intra-op threads on cores
  // of their own (rank r on the process's CPUs [r·t, r·t + t), t intra-op threads a rank) when
  // the ranks' threads fit the CPUs, from the first slice until the session ends. Unpinned,
  // the two teams' threads move over every core and meet on some.
  bool pin_cpu = true;
  // The model's split costs (fit_to_model sets them): auto predicts both splits from them.
  SplitCosts costs;
};

// Sets options.output_shape, frame_group and frame_offset (or `inside`) from the model's traits
// (the model is kept alive by the options).
void fit_to_model(SequenceParallelOptions& options, std::shared_ptr<const Model> model);

// `frames` in at most `ranks` runs of nearly equal length, the longer runs last (rank 0 also
// yields the sequence's first output frame alone). Never a run of 0.
std::vector<int> split_frames(int frames, int ranks);
// The same, the longer runs to the ranks that have done least so far (`done[r]`: rank r's
// output frames of the sequence's earlier slices; ties: the later rank, as split_frames). A time
// split's ranks run as a ring, each at most a slice ahead of the next, so the sequence takes as
// long as its busiest rank: 81 frames in slices of 8 latents over 2 ranks gave 37 and 44 output
// frames split evenly per slice (rank 0 yields the first frame alone), 41 and 40 this way.
std::vector<int> split_frames_balanced(int frames, const std::vector<int64_t>& done);

class SequenceParallelSession final : public PlacedSession {
 public:
  // Rank r runs `ranks[r]` on `workers[r]` (not owned; they outlive the session).
  SequenceParallelSession(std::vector<std::unique_ptr<ModelSession>> ranks,
                          std::vector<DeviceWorker*> workers, SequenceParallelOptions options = {});
  // Waits for the slices in flight.
  ~SequenceParallelSession() override;

  // Queues the slice on the ranks. With ctx.deferred: returns an empty Planar at once and puts
  // there the function that waits for the slice and returns its output (call the slices' in
  // order, or drop them: dropping waits too); without: waits and returns the output. May be
  // called from any thread, one call at a time (the ranks run on their workers); ctx.device and
  // ctx.halo are filled per rank.
  Planar run(Planar&& input, const RunContext& ctx) override;

  int ranks() const { return int(ranks_.size()); }
  // How the last slice run was split (kTime before any); slices run split by rows and in time.
  SplitBy last_split() const { return last_split_; }
  int64_t row_slices() const { return row_slices_; }
  int64_t time_slices() const { return time_slices_; }
  // Time split: slices run on one rank alone, as one device, because a rank could not hold its
  // causal state on its device (ModelSession::rank_holds_state; logged once per decision).
  int64_t solo_slices() const { return solo_slices_; }
  ExchangeStats exchange_stats() const { return group_->stats(); }
  const char* exchange_kind() const { return group_->kind(); }
  // Auto: the prediction its last choice was made from (null before one).
  const SplitPrediction* last_prediction() const { return predicted_ ? &prediction_ : nullptr; }
  // Per rank: seconds of its calls (options.serial: each rank alone, its compute time).
  std::vector<double> rank_seconds() const;

 private:
  struct SliceRun;
  struct RankPart;
  // Waits until every rank of `run` is done (watching the exchange's health and the run's
  // deadline, aborting the exchange on either), without taking the parts.
  static void wait_ranks(SliceRun& run);
  // Waits for `run`; the error taking it throws (the failing rank's, or the timeout's), or null.
  static std::exception_ptr failure_of(SliceRun& run);
  // Waits for `run` and returns its output (rethrows the failing rank's error).
  static Planar take(SliceRun& run);
  // Waits for every slice in flight, ignoring their errors (whoever takes them sees those).
  void drain();

  std::vector<std::unique_ptr<ModelSession>> ranks_;
  std::vector<DeviceWorker*> workers_;
  SequenceParallelOptions options_;
  std::shared_ptr<ExchangeGroup> group_;
  bool begun_ = false;
  std::map<int, SplitBy> chosen_;  // auto: per tile, the split its sequence's first slice chose
  // Time split, per tile: the last rank of the sequence's previous slice that handed its
  // history to the rank that starts the next one (-1: that rank keeps its own), that rank (0,
  // or with whole slices the next in turn), and whether the sequence ended.
  struct Ring {
    int last = -1;
    int next = 0;
    bool ended = false;
  };
  std::map<int, Ring> ring_;
  // Time split, per tile: each rank's output frames of the sequence so far
  // (split_frames_balanced).
  std::map<int, std::vector<int64_t>> done_;
  std::deque<std::shared_ptr<SliceRun>> in_flight_;
  struct Clocks;
  std::shared_ptr<Clocks> clocks_;  // per rank: seconds of its calls
  SplitBy last_split_ = SplitBy::kTime;
  int64_t row_slices_ = 0, time_slices_ = 0;
  SplitPrediction prediction_;
  bool predicted_ = false;
  bool pinned_ = false;  // options.pin_cpu done (pin_cpu_ranks)
  // Time split: whether the sequence runs on one rank alone (decide_solo, at a sequence's first
  // slice, asked again when the slices' size changes), and for which size it was decided.
  bool solo_ = false, solo_decided_ = false;
  std::pair<int, int> solo_shape_{0, 0};
  int64_t solo_slices_ = 0;
  void decide_solo(int height, int width);
  // Pins the CPU ranks (pin = true, once) or undoes it (false, when pinned).
  void pin_cpu_ranks(bool pin);
};

}  // namespace wm::parallel
