// Spatial parallelism of the Wan2.1 decoder on in-process CPU ranks: each rank decodes a band of
// the latent rows of every frame, exchanging boundary rows before every 3×3 convolution and
// gathering every band's tokens for the attention (parallel/halo_inprocess.h). It equals one
// device: in float64 to rounding (<= 1e-12) at the network level, in float32 (<= 1e-5) through
// SequenceParallelSession and the pipeline. 2, 3 and 4 ranks, uneven bands, a band of one row,
// several slices (each rank keeps its band's causal state), a clip of one latent frame, the
// nearest-upsample path and tail frame chunks; auto's choice (parallel::choose_split); the
// exchanges' order holds where sends wait for their receives (NCCL); a failing rank fails the
// slice without a hang.
// Weights and latents: the golden vectors in tests/data/golden/wan21-tiny/.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/halo_inprocess.h"
#include "parallel/scaling_model.h"
#include "parallel/sequence_parallel.h"
#include "scheduler/pipeline.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"
#include "src/models/wan21/torch/wan21_blocks.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"
#include "tests/support/slice_pipeline.h"
#include "tests/unit/wan21_float64.h"

namespace {

using wm::test::concat;
using wm::test::frames;
using wm::test::max_abs_diff;

namespace wan21 = wm::models::wan21;
using wm::Planar;
using wm::RunContext;
using wm::parallel::SplitBy;

const std::string& kGolden = wm::test::kWan21Golden;
using wm::test::float64_decoder;
using wm::test::Float64Weights;
using wm::test::read_tensor;
using wm::test::to_planar;

wm::ModelConfig tiny_config(const std::string& task = "decode") {
  return wm::test::wan21_tiny_config(task);
}

// The golden latents: [1, 16, 9, 6, 10].
at::Tensor golden_latents() {
  wm::io::SafetensorsFile file(kGolden + "decode_t9.safetensors");
  return read_tensor(file, "input");
}

// --- float64, network level ------------------------------------------------------------------

// Sends that wait until their receiver has started the matching receive, as NCCL's do on the
// device (a stream's transfers run one after the other): an exchange whose sends and receives
// form a cycle of ranks waiting on each other fails here (after 20 s) instead of passing
// because the in-process sends never wait.
class BlockingSends {
 public:
  class Rank final : public wm::exec::HaloExchange {
   public:
    Rank(BlockingSends& all, wm::exec::HaloExchange& inner) : all_(all), inner_(inner) {}
    int rank() const override { return inner_.rank(); }
    int ranks() const override { return inner_.ranks(); }
    void send(int to, const at::Tensor& t) override {
      inner_.send(to, t);
      std::unique_lock<std::mutex> lock(all_.mutex_);
      const int64_t n = ++all_.sent_[{rank(), to}];
      if (!all_.changed_.wait_for(lock, std::chrono::seconds(20), [&] {
            return all_.posted_[{rank(), to}] >= n;
          })) {
        throw wm::Error("rank " + std::to_string(rank()) + " waits in a send to rank " +
                            std::to_string(to) + ": the exchange's order deadlocks",
                        wm::kExitFailure);
      }
    }
    void recv(int from, at::Tensor& into) override {
      {
        std::lock_guard<std::mutex> lock(all_.mutex_);
        ++all_.posted_[{from, rank()}];
      }
      all_.changed_.notify_all();
      inner_.recv(from, into);
    }
    // Host values never wait for their receiver (in every exchange).
    void send_values(int to, const std::vector<int64_t>& values) override {
      inner_.send_values(to, values);
    }
    std::vector<int64_t> recv_values(int from) override { return inner_.recv_values(from); }

   private:
    BlockingSends& all_;
    wm::exec::HaloExchange& inner_;
  };
  BlockingSends(wm::parallel::InProcessGroup& group, int ranks) {
    for (int r = 0; r < ranks; ++r) ranks_.push_back(std::make_unique<Rank>(*this, group.rank(r)));
  }
  wm::exec::HaloExchange& rank(int r) { return *ranks_[size_t(r)]; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::pair<int, int>, int64_t> sent_, posted_;  // (from, to)
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// One slice of `x` ([1, C, T, H, W]) on ranks holding `bands` latent rows each (summing to H),
// rank r on a thread of its own with its own state states[r] (kept from slice to slice).
// `blocking`: sends wait for their receives (BlockingSends).
at::Tensor forward_bands(const wan21::Network& net, const at::Tensor& x,
                         std::vector<wan21::SequenceState>& states, bool first,
                         const std::vector<int>& bands, wm::parallel::InProcessGroup& group,
                         bool blocking = false) {
  const int ranks = int(bands.size());
  group.begin(ranks);
  BlockingSends blocked(group, ranks);
  states.resize(size_t(ranks));
  std::vector<at::Tensor> outs(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  int64_t top = 0;
  for (int r = 0; r < ranks; ++r) {
    const at::Tensor band = x.narrow(3, top, bands[size_t(r)]).contiguous();
    top += bands[size_t(r)];
    threads.emplace_back([&, r, band] {
      c10::InferenceMode inference;
      wan21::SequenceState& st = states[size_t(r)];
      st.row_halo = ranks == 1 ? nullptr : blocking ? &blocked.rank(r) : &group.rank(r);
      try {
        outs[size_t(r)] = net.forward(band, st, first);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        group.abort(e.what());
      }
      st.row_halo = nullptr;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(top, x.size(3));
  return at::cat(outs, 3);
}

struct BandCase {
  std::vector<int> bands;   // latent rows per rank
  std::vector<int> slices;  // latent frames per slice
};

void check_float64(const std::string& tuning, int64_t latent_frames,
                   const std::vector<BandCase>& cases) {
  c10::InferenceMode inference;
  const auto net = float64_decoder(tuning);
  // The golden latents, 6 rows, cropped to 4 columns (float64 convolutions are slow on the CPU).
  const at::Tensor x =
      golden_latents().narrow(2, 0, latent_frames).narrow(4, 0, 4).to(at::kDouble).contiguous();
  wan21::SequenceState whole_state;
  const at::Tensor whole = net->forward(x, whole_state, true);
  for (const BandCase& c : cases) {
    wm::parallel::InProcessGroup group(4);
    std::vector<wan21::SequenceState> states;
    std::vector<at::Tensor> outs;
    int64_t t0 = 0;
    std::string label = "bands";
    for (int b : c.bands) label += " " + std::to_string(b);
    label += ", slices";
    for (size_t i = 0; i < c.slices.size(); ++i) {
      label += " " + std::to_string(c.slices[i]);
      outs.push_back(
          forward_bands(*net, x.narrow(2, t0, c.slices[i]), states, i == 0, c.bands, group));
      t0 += c.slices[i];
    }
    ASSERT_EQ(t0, x.size(2)) << label;
    const at::Tensor got = at::cat(outs, 2);
    ASSERT_EQ(got.sizes(), whole.sizes()) << label;
    const double err = (got - whole).abs().max().item<double>();
    std::cout << "[ bands    ] float64 " << (tuning.empty() ? "" : tuning + " ") << label
              << ": max diff " << err << ", exchanged " << group.stats().bytes << " bytes\n";
    EXPECT_LE(err, 1e-12) << label;
    EXPECT_GT(group.stats().messages, 0) << label;
  }
}

TEST(SpatialParallel, Float64BandsEqualOneDevice) {
  check_float64("", 9,
                {
                    {{3, 3}, {9}},           // 2 ranks, even
                    {{1, 5}, {4, 5}},        // 2 ranks, a band of one row, two slices
                    {{2, 2, 2}, {2, 3, 4}},  // 3 ranks, three slices
                    {{1, 2, 1, 2}, {5, 4}},  // 4 ranks, uneven
                });
}

TEST(SpatialParallel, Float64OneLatentFrame) {
  // An image-like clip: one latent frame, one output frame; the time split could use one rank.
  check_float64("", 1, {{{3, 3}, {1}}, {{1, 1, 4}, {1}}, {{2, 1, 1, 2}, {1}}});
}

TEST(SpatialParallel, Float64NearestUpsampleAndTailChunks) {
  // Nearest 2× + 3×3 conv instead of the sub-pixel form; the decode tail in 2-frame chunks.
  check_float64("subpixel=0", 5, {{{2, 4}, {2, 3}}, {{1, 2, 3}, {5}}});
  check_float64("tail_frames=2", 5, {{{3, 1, 2}, {3, 2}}});
}

TEST(SpatialParallel, ExchangeOrderHoldsWhereSendsWait) {
  // The row exchanges and the attention's gather never have two ranks waiting on each other,
  // even where a send waits for its receive (NCCL): 2, 3 and 4 ranks, float64.
  c10::InferenceMode inference;
  const wan21::Architecture arch = wan21::Architecture::from(tiny_config());
  Float64Weights weights;
  auto stat = [](const std::vector<double>& v) {
    return at::tensor(v, at::kDouble).reshape({1, -1, 1, 1, 1});
  };
  const wan21::Network net(arch, wan21::Task::kDecode, weights,
                           stat(wm::models::wan21_latent_mean()),
                           stat(wm::models::wan21_latent_std()), at::MemoryFormat::Contiguous);
  const at::Tensor x = golden_latents().narrow(2, 0, 2).narrow(4, 0, 4).to(at::kDouble);
  wan21::SequenceState whole_state;
  const at::Tensor whole = net.forward(x, whole_state, true);
  for (const std::vector<int>& bands :
       {std::vector<int>{3, 3}, std::vector<int>{2, 2, 2}, std::vector<int>{1, 2, 2, 1}}) {
    wm::parallel::InProcessGroup group(4);
    std::vector<wan21::SequenceState> states;
    const at::Tensor got = forward_bands(net, x, states, true, bands, group, /*blocking=*/true);
    EXPECT_LE((got - whole).abs().max().item<double>(), 1e-12) << bands.size() << " ranks";
  }
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

std::unique_ptr<wm::parallel::SequenceParallelSession> spatial_session(
    const wm::Model& model, int ranks, std::vector<int> bands = {}, SplitBy by = SplitBy::kRows) {
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  std::vector<wm::parallel::DeviceWorker*> workers;
  for (int r = 0; r < ranks; ++r) {
    sessions.push_back(model.open_session(wm::Device{}));
    workers.push_back(&wm::parallel::device_worker(wm::Device{}, r));
  }
  wm::parallel::SequenceParallelOptions options;
  options.by = by;
  options.bands = std::move(bands);
  return std::make_unique<wm::parallel::SequenceParallelSession>(std::move(sessions),
                                                                 std::move(workers), options);
}

Planar run_slices(wm::ModelSession& session, const Planar& input, const std::vector<int>& sizes) {
  std::vector<Planar> outs;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back(session.run(frames(input, t0, sizes[i]),
                               slice_context(int64_t(i), i == 0, i + 1 == sizes.size())));
    t0 += sizes[i];
  }
  return concat(outs);
}

TEST(SpatialParallel, SessionsEqualOneDevice) {
  auto model = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  EXPECT_TRUE(model->traits().spatial_parallel);
  const Planar z = to_planar(golden_latents());
  struct Case {
    int ranks;
    std::vector<int> bands;   // per rank (empty: even)
    std::vector<int> slices;  // latent frames per slice
  };
  for (const Case& c : {Case{2, {}, {9}}, Case{3, {}, {4, 5}}, Case{4, {1, 2, 2, 1}, {2, 3, 4}},
                        Case{2, {5, 1}, {1}}, Case{3, {}, {1}}}) {
    int total = 0;
    for (int n : c.slices) total += n;
    const Planar whole =
        model->open_session(wm::Device{})->run(frames(z, 0, total), slice_context(0, true, true));
    auto session = spatial_session(*model, c.ranks, c.bands);
    const Planar got = run_slices(*session, frames(z, 0, total), c.slices);
    ASSERT_EQ(got.frames, whole.frames);
    ASSERT_EQ(got.height, whole.height);
    const double err = max_abs_diff(got, whole);
    std::cout << "[ bands    ] float32 " << c.ranks << " ranks, " << c.slices.size()
              << " slices of " << total << " latent frames: max diff " << err << ", exchanged "
              << session->exchange_stats().bytes << " bytes\n";
    EXPECT_LE(err, 1e-5) << c.ranks << " ranks";
    EXPECT_GT(session->exchange_stats().messages, 0);
    EXPECT_EQ(session->last_split(), SplitBy::kRows);
  }
}

TEST(SpatialParallel, AutoChoosesRowsWhereTheyWin) {
  using wm::parallel::choose_split;
  const auto gpu = wm::Device::Kind::kCuda, cpu = wm::Device::Kind::kCpu;
  // GPUs: rows only where a time split leaves ranks idle.
  EXPECT_EQ(choose_split(1, 60, 2, gpu), SplitBy::kRows);
  EXPECT_EQ(choose_split(3, 60, 4, gpu), SplitBy::kRows);
  EXPECT_EQ(choose_split(4, 60, 4, gpu), SplitBy::kTime);
  EXPECT_EQ(choose_split(1, 7, 4, gpu), SplitBy::kTime);  // < 2 rows per rank
  EXPECT_EQ(choose_split(1, 8, 4, gpu), SplitBy::kRows);
  // CPU ranks: rows wherever every rank gets 2 rows.
  EXPECT_EQ(choose_split(16, 8, 4, cpu), SplitBy::kRows);
  EXPECT_EQ(choose_split(1, 7, 4, cpu), SplitBy::kTime);

  auto model = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const Planar z = to_planar(golden_latents());
  const Planar whole =
      model->open_session(wm::Device{})->run(frames(z, 0, 9), slice_context(0, true, true));
  // 3 CPU ranks on 6 latent rows: rows, for every slice of the sequence.
  auto three = spatial_session(*model, 3, {}, SplitBy::kAuto);
  EXPECT_LE(max_abs_diff(run_slices(*three, z, {5, 4}), whole), 1e-5);
  EXPECT_EQ(three->row_slices(), 2);
  EXPECT_EQ(three->time_slices(), 0);
  // 4 CPU ranks on 6 latent rows: time (fewer than 2 rows per rank), even for 2-frame slices.
  auto four = spatial_session(*model, 4, {}, SplitBy::kAuto);
  EXPECT_LE(max_abs_diff(run_slices(*four, z, {2, 3, 4}), whole), 1e-5);
  EXPECT_EQ(four->row_slices(), 0);
  EXPECT_EQ(four->time_slices(), 3);
  EXPECT_EQ(four->last_split(), SplitBy::kTime);
}

TEST(SpatialParallel, AutoPredictsBothSplitsByTheScalingModel) {
  using wm::parallel::predict_split;
  using wm::parallel::SliceFacts;
  // Costs of the size of the full Wan2.1 decoder in bf16 (what its traits say, rounded).
  wm::SplitCosts costs;
  costs.flops_per_pixel = 8.5e6;
  costs.temporal_factor = 4;
  costs.spatial_factor = 8;
  costs.state_bytes_per_pixel = 3.0e5;
  costs.row_bytes_per_column = 1.2e5;
  costs.row_messages = 40;
  auto facts = [](int frames, int rows, int cols, bool first, bool last, int ranks) {
    SliceFacts f;
    f.frames = frames;
    f.rows = rows;
    f.cols = cols;
    f.first = first;
    f.last = last;
    f.ranks = ranks;
    f.kind = wm::Device::Kind::kCuda;
    return f;
  };
  // An image on 2 GPUs: a time split leaves one idle.
  auto p = predict_split(facts(1, 60, 104, true, true, 2), costs);
  EXPECT_TRUE(p.rows) << p.why;
  EXPECT_NEAR(p.time_speedup, 1.0, 1e-9) << p.why;
  EXPECT_GT(p.rows_speedup, 1.8) << p.why;
  EXPECT_NE(p.why.find("rows: 1 latent frame of 60x104 on 2 ranks"), std::string::npos) << p.why;
  // A short clip in one slice: 5 latent frames split 2 + 3 give 5 and 12 output frames.
  p = predict_split(facts(5, 60, 104, true, true, 2), costs);
  EXPECT_TRUE(p.rows) << p.why;
  EXPECT_NEAR(p.time_speedup, 17.0 / 12.0, 0.01) << p.why;
  // A long video's slices of 4: even parts, the state's transfer beside the compute.
  p = predict_split(facts(4, 90, 160, true, false, 2), costs);
  EXPECT_FALSE(p.rows) << p.why;
  EXPECT_NEAR(p.time_speedup, 2.0, 0.01) << p.why;
  EXPECT_LT(p.rows_speedup, p.time_speedup) << p.why;
  // 4 GPUs, slices of 4 latent frames: time; too few latent rows for rows: time.
  EXPECT_FALSE(predict_split(facts(4, 135, 240, true, false, 4), costs).rows);
  p = predict_split(facts(1, 7, 104, true, true, 4), costs);
  EXPECT_FALSE(p.rows) << p.why;
  EXPECT_NE(p.why.find("rows need 2 latent rows per rank"), std::string::npos) << p.why;
  // Without costs: the fixed rule.
  EXPECT_TRUE(predict_split(facts(1, 60, 104, true, true, 2), wm::SplitCosts{}).rows);
  EXPECT_FALSE(predict_split(facts(4, 60, 104, true, false, 2), wm::SplitCosts{}).rows);
  // The Wan2.1 decoder gives its costs.
  auto model = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const wm::SplitCosts& c = model->traits().split_costs;
  EXPECT_GT(c.flops_per_pixel, 0);
  EXPECT_EQ(c.temporal_factor, 4);
  EXPECT_EQ(c.spatial_factor, 8);
  EXPECT_GT(c.state_bytes_per_pixel, c.row_bytes_per_column);
  EXPECT_GT(c.row_messages, 30);
}

TEST(SpatialParallel, FailingRankFailsTheSliceWithoutHanging) {
  auto decoder = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  auto encoder = wm::models::make_wan21_vae(tiny_config("encode"), wm::Device{});
  // Rank 1 is an encoder session: it refuses the decoder's latents, while rank 0 waits for it.
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  sessions.push_back(decoder->open_session(wm::Device{}));
  sessions.push_back(encoder->open_session(wm::Device{}));
  std::vector<wm::parallel::DeviceWorker*> workers = {
      &wm::parallel::device_worker(wm::Device{}, 0), &wm::parallel::device_worker(wm::Device{}, 1)};
  wm::parallel::SequenceParallelOptions options;
  options.by = SplitBy::kRows;
  wm::parallel::SequenceParallelSession session(std::move(sessions), std::move(workers), options);
  Planar z = frames(to_planar(golden_latents()), 0, 2);
  try {
    session.run(std::move(z), slice_context(0, true, true));
    ADD_FAILURE() << "no error";
  } catch (const wm::ModelError& e) {  // the failing rank's own error, not the abort's echo
    const std::string msg = e.what();
    EXPECT_NE(msg.find("wan2.1-vae encode"), std::string::npos) << msg;
  }
  // A good pair of ranks decodes the next input.
  auto good = spatial_session(*decoder, 2);
  EXPECT_EQ(
      good->run(frames(to_planar(golden_latents()), 0, 3), slice_context(0, true, true)).frames, 9);
}

TEST(SpatialParallel, PipelineTilesWithBandsEqualOneDevice) {
  auto model = wm::models::make_wan21_vae(tiny_config(), wm::Device{});
  const Planar z = to_planar(golden_latents());
  std::vector<std::unique_ptr<wm::ModelSession>> one;
  one.push_back(model->open_session(wm::Device{}));
  const Planar expected = wm::test::decode_in_pipeline(one, z, model->traits());
  std::vector<std::unique_ptr<wm::ModelSession>> ranks;
  ranks.push_back(spatial_session(*model, 2));
  const double err =
      max_abs_diff(wm::test::decode_in_pipeline(ranks, z, model->traits()), expected);
  std::cout << "[ bands    ] float32 pipeline tiles × 2 spatial ranks: max diff " << err << "\n";
  EXPECT_LE(err, 1e-5);
}

}  // namespace
