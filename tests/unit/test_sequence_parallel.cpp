// Sequence parallelism of the Wan2.1 decoder on in-process CPU ranks: each slice's latent frames
// split in time over 2, 3 or 4 ranks that exchange every causal layer's history
// (parallel/halo_inprocess.h) equal one device: in float64 to rounding (<= 1e-12) at the
// network level, in float32 (<= 1e-5) through SequenceParallelSession and the pipeline. Uneven
// splits, a rank that holds only the first latent frame, several slices, decode-tail tiles and
// pipeline tiles together with ranks; a failing rank fails the slice without a hang.
// Weights and latents: the golden vectors in tests/data/golden/wan21-tiny/.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/halo_inprocess.h"
#include "parallel/rank_run.h"
#include "parallel/sequence_parallel.h"
#include "scheduler/pipeline.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"
#include "src/models/wan21/torch/wan21_blocks.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tests/support/planar_ops.h"
#include "tests/support/rank_threads.h"
#include "tests/support/run.h"
#include "tests/support/slice_pipeline.h"
#include "tests/unit/wan21_float64.h"

namespace {

using wm::test::concat;
using wm::test::forward_ring;
using wm::test::frames;
using wm::test::max_abs_diff;
using wm::test::run_in_slices;

namespace wan21 = wm::models::wan21;
using wm::Planar;
using wm::RunContext;

const std::string& kGolden = wm::test::kWan21Golden;
using wm::test::float64_decoder;
using wm::test::Float64Weights;
using wm::test::read_tensor;
using wm::test::to_planar;

wm::ModelConfig tiny_config(const std::string& task = "decode") {
  return wm::test::wan21_tiny_config(task);
}

// The golden latents (9 frames of 6×10) and the reference decoder's output.
struct Golden {
  at::Tensor input, output;
};
Golden golden_t9() {
  wm::io::SafetensorsFile file(kGolden + "decode_t9.safetensors");
  return {read_tensor(file, "input"), read_tensor(file, "output")};
}

// --- float64, network level ------------------------------------------------------------------

struct SplitCase {
  std::vector<std::vector<int>> slices;  // per slice, latent frames per rank
};

// The golden latents, cropped to 4×4 (float64 convolutions are slow on the CPU), `repeat`
// times one after the other (a longer sequence).
at::Tensor float64_latents(int repeat = 1) {
  const at::Tensor x = golden_t9().input.narrow(3, 0, 4).narrow(4, 0, 4).to(at::kDouble);
  return at::cat(std::vector<at::Tensor>(size_t(repeat), x), 2);
}

void check_float64(const std::string& tuning, const std::vector<SplitCase>& cases, int repeat = 1) {
  c10::InferenceMode inference;
  const auto net = float64_decoder(tuning);
  const at::Tensor x = float64_latents(repeat);
  wan21::SequenceState whole_state;
  const at::Tensor whole = net->forward(x, whole_state, true);
  for (const SplitCase& c : cases) {
    wm::parallel::InProcessGroup group(4);
    std::string label;
    for (const auto& slice : c.slices) {
      label += "[";
      for (int k : slice) label += std::to_string(k) + " ";
      label += "]";
    }
    const at::Tensor got = forward_ring<wan21::SequenceState>(
        x, c.slices, group, [&](const at::Tensor& part, wan21::SequenceState& st, bool first) {
          return net->forward(part, st, first);
        });
    ASSERT_EQ(got.sizes(), whole.sizes()) << label;
    const double err = (got - whole).abs().max().item<double>();
    std::cout << "[ ranks    ] float64 " << (tuning.empty() ? "" : tuning + " ") << label
              << ": max diff " << err << "\n";
    EXPECT_LE(err, 1e-12) << label;
  }
}

TEST(SequenceParallel, Float64RanksEqualOneDevice) {
  check_float64("", {
                        {{{4, 5}}},                    // 2 ranks, uneven
                        {{{1, 8}}},                    // rank 0 holds only the first latent frame
                        {{{2, 2, 2, 3}}},              // 4 ranks
                        {{{1, 1, 1}, {2, 3}, {1}}},    // 3 ranks of one frame, 2 ranks, 1 rank
                        {{{2, 2}, {1, 2, 2}}},         // later slice: rank 0 with one frame
                        {{{1}, {1, 1}, {2, 1}, {3}}},  // a slice run alone, then the ring again
                    });
}

TEST(SequenceParallel, Float64RingOfSlicesOfOneToFourLatentFrames) {
  // Slices of 1-4 latent frames on 2, 3 and 4 ranks, every slice's history going around the
  // ring (rank 0 takes it from the last rank of the slice before, layer by layer).
  check_float64("", {
                        {{{1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}},  // 1 per rank
                        {{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}},      // 3 ranks
                        {{{1, 1, 1, 1}, {1, 1, 1, 1}, {1}}},      // 4 ranks
                        {{{2, 2}, {1, 3}, {1}}},                  // uneven, 4 frames a slice
                    });
}

TEST(SequenceParallel, Float64RingOverALongSequence) {
  // 18 latent frames (the golden ones twice), 69 output frames: slices of 4 on 4 ranks.
  std::vector<std::vector<int>> fours(4, std::vector<int>{1, 1, 1, 1});
  fours.push_back({1, 1});
  check_float64("", {{fours}}, 2);
}

TEST(SequenceParallel, Float64RanksWithTailTiles) {
  // The decode tail in 2×2 exact tiles (each tile's causal state exchanged on its own).
  check_float64("tail_tiles=2x2", {{{{2, 3}, {1, 3}}}});
}

TEST(SequenceParallel, Float64RanksWithTailChunks) {
  // A rank's tail in frame chunks (each layer takes its history before its first chunk and
  // hands it on after its last), with and without tiles.
  check_float64("tail_frames=3", {{{{1, 1}, {2, 2}, {1, 2}}}});
  check_float64("tail_tiles=2x2,tail_frames=2", {{{{2, 3}, {2, 2}}}});
}

TEST(SequenceParallel, Float64RanksWithTimeUpsampleChunks) {
  // The upsamples' time convs in chunks of one and two frames on every rank, as one device runs
  // a large slice: each takes its history before its first chunk and hands it on after its last.
  check_float64("time_conv_frames=1", {{{{2, 3}, {1, 3}}}, {{{1, 1, 1}, {2, 2}, {2}}}});
  check_float64("time_conv_frames=2", {{{{4, 5}}}, {{{2, 2, 2, 3}}}});
}

TEST(SequenceParallel, SplitFrames) {
  EXPECT_EQ(wm::parallel::split_frames(9, 2), (std::vector<int>{4, 5}));
  EXPECT_EQ(wm::parallel::split_frames(9, 4), (std::vector<int>{2, 2, 2, 3}));
  EXPECT_EQ(wm::parallel::split_frames(2, 4), (std::vector<int>{1, 1}));
  EXPECT_EQ(wm::parallel::split_frames(1, 3), (std::vector<int>{1}));
}

TEST(SequenceParallel, SplitFramesBalancedGivesTheRestToTheRanksBehind) {
  using wm::parallel::split_frames_balanced;
  // Nothing done yet: as split_frames (the longer runs last).
  EXPECT_EQ(split_frames_balanced(9, {0, 0}), (std::vector<int>{4, 5}));
  EXPECT_EQ(split_frames_balanced(9, {0, 0, 0, 0}), (std::vector<int>{2, 2, 2, 3}));
  // 81 frames of Wan2.1 in slices of 8, 8 and 5 latents over 2 ranks: after 13 + 16 and 16 + 16
  // output frames, the fifth latent goes to rank 0 (41 and 40 frames, not 37 and 44).
  EXPECT_EQ(split_frames_balanced(5, {29, 32}), (std::vector<int>{3, 2}));
  EXPECT_EQ(split_frames_balanced(6, {5, 8, 8, 1}), (std::vector<int>{2, 1, 1, 2}));
  // Equal loads: the later ranks, fewer frames than ranks: the first ranks only.
  EXPECT_EQ(split_frames_balanced(3, {4, 4, 4, 4}), (std::vector<int>{1, 1, 1}));
}

// Host values between ranks (a tail plan, token counts): in order per pair, each pair apart,
// forgotten by a new run; a receive with nothing coming fails the group at its timeout, and an
// abort ends a waiting receive with the abort's reason.
TEST(SequenceParallel, HostValuesKeepTheirOrderAndFailWithTheGroup) {
  wm::parallel::InProcessGroup group(3, std::chrono::milliseconds(300));
  group.begin(3);
  wm::exec::HaloExchange& r0 = group.rank(0);
  wm::exec::HaloExchange& r1 = group.rank(1);
  wm::exec::HaloExchange& r2 = group.rank(2);
  r0.send_values(1, {1, 2, 3});
  r0.send_values(1, {4});
  r2.send_values(1, {9});
  r0.send_values(2, {7});
  EXPECT_EQ(r1.recv_values(2), (std::vector<int64_t>{9}));
  EXPECT_EQ(r1.recv_values(0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r1.recv_values(0), (std::vector<int64_t>{4}));
  group.begin(3);  // the {7} for rank 2 is forgotten
  try {
    r2.recv_values(0);
    ADD_FAILURE() << "a receive with nothing sent returned";
  } catch (const wm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 waited"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(group.failed());
  EXPECT_THROW(r0.send_values(1, {1}), wm::Error);

  wm::parallel::InProcessGroup patient(2, std::chrono::minutes(10));
  patient.begin(2);
  std::string error;
  std::thread waiter([&] {
    try {
      patient.rank(0).recv_values(1);
    } catch (const wm::Error& e) {
      error = e.what();
    }
  });
  patient.abort("rank 1 failed: out of memory");
  waiter.join();
  EXPECT_NE(error.find("rank 1 failed: out of memory"), std::string::npos) << error;
}

// Ranks of one process without a session (parallel/rank_run.h, the benchmarks' split runs): each
// rank runs on a worker of its own with its view of the group; a run's values pass between them,
// and a failing rank aborts the one waiting for it and is the one reported. The next run of the
// same ranks starts clean.
TEST(SequenceParallel, InProcessRanksRunAtOnceAndReportTheRankThatFailed) {
  const wm::Device cpu{wm::Device::Kind::kCpu, 0};
  wm::parallel::InProcessRanks ranks({cpu}, 2, /*first_lane=*/1, std::chrono::minutes(10));
  auto ring = [](int r, wm::RunContext& ctx) {
    EXPECT_NE(ctx.device, nullptr);
    wm::exec::HaloExchange& halo = *ctx.halo;
    // Rank 0 hands a value to rank 1, which hands it back doubled: both must run at once.
    int64_t v = 0;
    if (r == 0) {
      halo.send_values(1, {21});
      v = halo.recv_values(1).at(0);
    } else {
      v = 2 * halo.recv_values(0).at(0);
      halo.send_values(0, {v});
    }
    wm::Planar p(1, 1, 1, 1);
    p.data[0] = float(v + r);
    return p;
  };
  std::vector<wm::Planar> out = ranks.run(true, ring);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data[0], 42.f);
  EXPECT_EQ(out[1].data[0], 43.f);
  try {
    ranks.run(true, [](int r, wm::RunContext& ctx) {
      if (r == 1) throw wm::ModelError("out of memory on purpose");
      ctx.halo->recv_values(1);  // never sent: ends with rank 1's abort
      return wm::Planar(1, 1, 1, 1);
    });
    ADD_FAILURE() << "a run with a failing rank returned";
  } catch (const wm::ModelError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("rank 1: ", 0), 0u) << what;
    EXPECT_NE(what.find("out of memory on purpose"), std::string::npos) << what;
  }
  out = ranks.run(true, ring);
  EXPECT_EQ(out[1].data[0], 43.f);
  // Without the exchange no rank has a view.
  out = ranks.run(false, [](int r, wm::RunContext& ctx) {
    wm::Planar p(1, 1, 1, 1);
    p.data[0] = ctx.halo ? -1.f : float(r);
    return p;
  });
  EXPECT_EQ(out[0].data[0], 0.f);
  EXPECT_EQ(out[1].data[0], 1.f);
}

// --- float32, sessions and the pipeline -------------------------------------------------------

RunContext slice_context(int64_t index, bool first, bool last, int tile = 0) {
  RunContext ctx;
  ctx.slice_index = index;
  ctx.first_slice = first;
  ctx.last_slice = last;
  ctx.tile_index = tile;
  return ctx;
}

// `model` (null: the ranks return their parts and the session copies them together; else they
// write into the slice's output, fit_to_model).
std::unique_ptr<wm::parallel::SequenceParallelSession> parallel_session(
    const wm::Model& model, int ranks, std::vector<int> split = {},
    std::shared_ptr<const wm::Model> shaped = nullptr, bool whole_slices = false) {
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  std::vector<wm::parallel::DeviceWorker*> workers;
  for (int r = 0; r < ranks; ++r) {
    sessions.push_back(model.open_session(wm::Device{}));
    workers.push_back(&wm::parallel::device_worker(wm::Device{}, r));
  }
  wm::parallel::SequenceParallelOptions options;
  options.split = std::move(split);
  options.whole_slices = whole_slices;
  if (shaped) wm::parallel::fit_to_model(options, shaped);
  return std::make_unique<wm::parallel::SequenceParallelSession>(std::move(sessions),
                                                                 std::move(workers), options);
}

TEST(SequenceParallel, SessionsEqualOneDevice) {
  const std::shared_ptr<const wm::Model> model =
      wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  EXPECT_TRUE(model->traits().sequence_parallel);
  const Planar z = to_planar(golden_t9().input);
  const Planar whole =
      model->open_session(wm::Device{})->run(frames(z, 0, 9), slice_context(0, true, true));
  struct Case {
    int ranks;
    std::vector<int> split;   // per rank (empty: even)
    std::vector<int> slices;  // latent frames per slice
  };
  for (const Case& c : {Case{2, {}, {9}}, Case{3, {}, {4, 5}}, Case{4, {1, 2, 2, 3}, {5, 4}},
                        Case{2, {1, 3}, {2, 3, 4}}}) {
    // Parts copied together, and parts written into the slice's output taken a slice later.
    for (bool into : {false, true}) {
      auto session = parallel_session(*model, c.ranks, c.split, into ? model : nullptr);
      const double err = max_abs_diff(run_in_slices(*session, z, c.slices, into), whole);
      std::cout << "[ ranks    ] float32 " << c.ranks << " ranks, " << c.slices.size() << " slices"
                << (into ? ", in place, overlapped" : "") << ": max diff " << err << ", exchanged "
                << session->exchange_stats().bytes << " bytes\n";
      EXPECT_LE(err, 1e-5) << c.ranks << " ranks";
      EXPECT_GT(session->exchange_stats().messages, 0);
    }
  }
}

TEST(SequenceParallel, RingOverALongSequenceEqualsOneDevice) {
  // 18 latent frames (the golden ones twice) in slices of 1-4 on 2, 3 and 4 ranks, each slice
  // taken after the next one was queued: rank 0 starts a slice while the others still finish
  // the one before.
  const std::shared_ptr<const wm::Model> model =
      wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const at::Tensor t9 = golden_t9().input;
  const Planar z = to_planar(at::cat({t9, t9}, 2));
  const Planar whole =
      model->open_session(wm::Device{})->run(frames(z, 0, 18), slice_context(0, true, true));
  for (const auto& [ranks, slice] :
       std::vector<std::pair<int, int>>{{2, 1}, {3, 2}, {4, 3}, {4, 4}}) {
    std::vector<int> sizes(size_t(18 / slice), slice);
    if (18 % slice) sizes.push_back(18 % slice);
    auto session = parallel_session(*model, ranks, {}, model);
    const double err = max_abs_diff(run_in_slices(*session, z, sizes, true), whole);
    std::cout << "[ ranks    ] float32 " << ranks << " ranks, slices of " << slice << ": max diff "
              << err << "\n";
    EXPECT_LE(err, 1e-5) << ranks << " ranks, slices of " << slice;
  }
}

TEST(SequenceParallel, WholeSlicesInTurnEqualOneDeviceBitForBit) {
  // Each slice whole to one rank, the ranks in turn, the histories handed round the ring: every
  // rank runs one device's convolutions on one device's slices, so the output is one device's
  // in the same slices, bit for bit (CPU), and every rank ran slices of its own.
  const std::shared_ptr<const wm::Model> model =
      wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const at::Tensor t9 = golden_t9().input;
  const Planar z = to_planar(at::cat({t9, t9}, 2));  // 18 latent frames
  struct Case {
    int ranks;
    std::vector<int> slices;
  };
  for (const Case& c :
       {Case{2, {4, 4, 4, 4, 2}}, Case{3, {1, 2, 3, 4, 5, 3}}, Case{4, {5, 5, 8}}, Case{2, {18}}}) {
    const Planar one = run_in_slices(*model->open_session(wm::Device{}), z, c.slices, true);
    for (bool into : {false, true}) {
      auto session = parallel_session(*model, c.ranks, {}, into ? model : nullptr, true);
      const double err = max_abs_diff(run_in_slices(*session, z, c.slices, into), one);
      std::cout << "[ ranks    ] whole slices, " << c.ranks << " ranks, " << c.slices.size()
                << " slices" << (into ? ", in place, overlapped" : "") << ": max diff " << err
                << "\n";
      EXPECT_EQ(err, 0.0) << c.ranks << " ranks";
      const std::vector<double> seconds = session->rank_seconds();
      const size_t used = std::min(size_t(c.ranks), c.slices.size());
      for (size_t r = 0; r < seconds.size(); ++r) {
        EXPECT_EQ(seconds[r] > 0, r < used) << "rank " << r << " of " << c.ranks;
      }
      // A history crosses ranks at every slice after the first.
      EXPECT_EQ(session->exchange_stats().messages > 0, c.slices.size() > 1);
    }
  }
}

// A model whose sessions, as ranks, hold their causal state only while at most `fits` ranks
// share their device (SeedVR2 at 1080p in 16 GiB: one rank's share of the device is too small
// for its state); what they were asked is counted.
class CrampedModel final : public wm::Model {
 public:
  struct Asked {
    std::atomic<int> calls{0};
    std::atomic<int> device_ranks{0}, height{0}, width{0};
    std::atomic<bool> with_device{false};
  };
  CrampedModel(std::shared_ptr<const wm::Model> inner, int fits)
      : inner_(std::move(inner)), fits_(fits) {}
  const wm::ModelTraits& traits() const override { return inner_->traits(); }
  int64_t output_frames(int64_t frames) const override { return inner_->output_frames(frames); }
  std::unique_ptr<wm::ModelSession> open_session(const wm::Device& device) const override {
    return std::make_unique<Session>(inner_->open_session(device), fits_, asked_);
  }
  const Asked& asked() const { return *asked_; }

 private:
  class Session final : public wm::ModelSession {
   public:
    Session(std::unique_ptr<wm::ModelSession> inner, int fits, std::shared_ptr<Asked> asked)
        : inner_(std::move(inner)), fits_(fits), asked_(std::move(asked)) {}
    Planar run(Planar&& input, const RunContext& ctx) override {
      return inner_->run(std::move(input), ctx);
    }
    bool rank_holds_state(int height, int width, int device_ranks,
                          wm::exec::DeviceContext* device) const override {
      asked_->calls += 1;
      asked_->height = height, asked_->width = width, asked_->device_ranks = device_ranks;
      asked_->with_device = device != nullptr;
      return device_ranks <= fits_;
    }

   private:
    std::unique_ptr<wm::ModelSession> inner_;
    int fits_;
    std::shared_ptr<Asked> asked_;
  };
  std::shared_ptr<const wm::Model> inner_;
  int fits_;
  std::shared_ptr<Asked> asked_ = std::make_shared<Asked>();
};

TEST(SequenceParallel, RanksThatCannotHoldTheStateRunTheSequenceAsOneDevice) {
  // Ranks whose share of the device cannot hold the causal state: every slice of the sequence
  // runs on rank 0 alone, as one device (bit for bit one device's output in the same slices),
  // with nothing exchanged; the question is asked once per slice size, at a sequence's first
  // slice. Where the state fits, the same session splits as before.
  const std::shared_ptr<const wm::Model> wan =
      wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const at::Tensor t9 = golden_t9().input;
  const Planar z = to_planar(at::cat({t9, t9}, 2));  // 18 latent frames of 6 × 10
  const std::vector<int> slices = {4, 4, 4, 4, 2};
  const Planar one = run_in_slices(*wan->open_session(wm::Device{}), z, slices, true);
  for (int ranks : {2, 3}) {
    for (bool into : {false, true}) {
      auto cramped = std::make_shared<const CrampedModel>(wan, 1);
      auto session = parallel_session(*cramped, ranks, {}, into ? cramped : nullptr);
      for (int sequence = 0; sequence < 2; ++sequence) {
        const double err = max_abs_diff(run_in_slices(*session, z, slices, into), one);
        std::cout << "[ ranks    ] " << ranks << " cramped ranks" << (into ? ", in place" : "")
                  << ", sequence " << sequence << ": max diff " << err << "\n";
        EXPECT_EQ(err, 0.0) << ranks << " ranks";
      }
      EXPECT_EQ(session->solo_slices(), int64_t(2 * slices.size()));
      EXPECT_EQ(session->exchange_stats().messages, 0);
      const std::vector<double> seconds = session->rank_seconds();
      for (size_t r = 0; r < seconds.size(); ++r) {
        EXPECT_EQ(seconds[r] > 0, r == 0) << "rank " << r << " of " << ranks;
      }
      const CrampedModel::Asked& asked = cramped->asked();
      EXPECT_EQ(asked.calls.load(), 1) << "asked again for the same size";
      EXPECT_EQ(asked.device_ranks.load(), ranks);
      EXPECT_EQ(asked.height.load(), 6);
      EXPECT_EQ(asked.width.load(), 10);
      EXPECT_TRUE(asked.with_device.load());
    }
  }
  // Room for two ranks on the device: the split runs as before.
  auto roomy = std::make_shared<const CrampedModel>(wan, 2);
  auto session = parallel_session(*roomy, 2, {}, roomy);
  EXPECT_LE(max_abs_diff(run_in_slices(*session, z, slices, true), one), 1e-5);
  EXPECT_EQ(session->solo_slices(), 0);
  EXPECT_GT(session->exchange_stats().messages, 0);
  EXPECT_EQ(roomy->asked().calls.load(), 2) << "each rank asked";
}

// The CPUs a thread may run on.
std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

TEST(SequenceParallel, CpuRanksRunOnCoresOfTheirOwnWhileTheSessionLasts) {
  const std::vector<int> all = thread_cpus();
  if (all.size() < 2) GTEST_SKIP() << "one CPU";
  at::set_num_threads(1);  // 2 ranks of 1 intra-op thread fit any host of 2 CPUs or more
  const std::shared_ptr<const wm::Model> model =
      wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const Planar z = to_planar(golden_t9().input);
  const Planar whole =
      model->open_session(wm::Device{})->run(frames(z, 0, 9), slice_context(0, true, true));
  auto cpus_of = [](int lane) {
    return wm::parallel::device_worker(wm::Device{}, lane).call([] { return thread_cpus(); });
  };
  {
    auto session = parallel_session(*model, 2, {}, model);
    EXPECT_EQ(cpus_of(0), all) << "pinned before its first slice";
    EXPECT_LE(max_abs_diff(run_in_slices(*session, z, {4, 5}, true), whole), 1e-5);
    EXPECT_EQ(cpus_of(0), std::vector<int>{all[0]});
    EXPECT_EQ(cpus_of(1), std::vector<int>{all[1]});
  }
  // The workers outlive the session: every CPU again.
  EXPECT_EQ(cpus_of(0), all);
  EXPECT_EQ(cpus_of(1), all);
  // Not asked for: never pinned.
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  std::vector<wm::parallel::DeviceWorker*> workers;
  for (int r = 0; r < 2; ++r) {
    sessions.push_back(model->open_session(wm::Device{}));
    workers.push_back(&wm::parallel::device_worker(wm::Device{}, r));
  }
  wm::parallel::SequenceParallelOptions options;
  options.pin_cpu = false;
  wm::parallel::fit_to_model(options, model);
  wm::parallel::SequenceParallelSession unpinned(std::move(sessions), std::move(workers), options);
  EXPECT_LE(max_abs_diff(run_in_slices(unpinned, z, {4, 5}, true), whole), 1e-5);
  EXPECT_EQ(cpus_of(1), all);
}

TEST(SequenceParallel, FailingRankFailsTheSliceWithoutHanging) {
  auto decoder = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  auto encoder = wm::models::make_wan21_vae(tiny_config("encode"), wm::Device{});
  // Rank 1 is an encoder session: it refuses the decoder's latents, while rank 0 waits for it.
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  sessions.push_back(decoder->open_session(wm::Device{}));
  sessions.push_back(encoder->open_session(wm::Device{}));
  std::vector<wm::parallel::DeviceWorker*> workers = {
      &wm::parallel::device_worker(wm::Device{}, 0), &wm::parallel::device_worker(wm::Device{}, 1)};
  wm::parallel::SequenceParallelSession session(std::move(sessions), std::move(workers));
  Planar z = frames(to_planar(golden_t9().input), 0, 4);
  try {
    session.run(std::move(z), slice_context(0, true, true));
    ADD_FAILURE() << "no error";
  } catch (const wm::ModelError& e) {  // the failing rank's own error, not the abort's echo
    const std::string msg = e.what();
    EXPECT_NE(msg.find("wan2.1-vae encode"), std::string::npos) << msg;
  }
  // The group is usable again: a good pair of ranks decodes the next input.
  auto good = parallel_session(*decoder, 2);
  EXPECT_EQ(
      good->run(frames(to_planar(golden_t9().input), 0, 3), slice_context(0, true, true)).frames,
      9);
}

TEST(SequenceParallel, PipelineTilesWithRanksEqualOneDevice) {
  auto model = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const Planar z = to_planar(golden_t9().input);
  std::vector<std::unique_ptr<wm::ModelSession>> one;
  one.push_back(model->open_session(wm::Device{}));
  const Planar expected = wm::test::decode_in_pipeline(one, z, model->traits());
  std::vector<std::unique_ptr<wm::ModelSession>> ranks;
  ranks.push_back(parallel_session(*model, 3));
  const double err =
      max_abs_diff(wm::test::decode_in_pipeline(ranks, z, model->traits()), expected);
  std::cout << "[ ranks    ] float32 pipeline tiles × 3 ranks: max diff " << err << "\n";
  EXPECT_LE(err, 1e-5);
}

}  // namespace
