// Sequence parallelism of the SeedVR2 VAE, decoder and encoder (spec §5: rank r holds the r-th
// run of a slice's frames; before every causal conv it takes the conv's memory from the rank
// before it in the ring, and rank 0 from the last rank of the previous slice; only rank 0 of the
// sequence's first slice pads by replication and drops the Upsample3D head frame; the encoder's
// parts are whole temporal downsampling windows) on in-process CPU ranks: in float64 to rounding
// (<= 1e-12) at the network level, in float32 (<= 1e-5) through SequenceParallelSession; uneven
// splits, a rank holding only the first latent frame, several slices taken a slice late (so
// slices overlap on the ranks), ranks in time chunks and in phases.
// Weights, latents and video: tests/data/golden/seedvr2-tiny/.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/halo_inprocess.h"
#include "parallel/sequence_parallel.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/seedvr2/torch/seedvr2_blocks.h"
#include "src/weights/safetensors.h"
#include "tests/support/planar_ops.h"
#include "tests/support/rank_threads.h"
#include "tests/support/slice_pipeline.h"

namespace {

using wm::test::concat;
using wm::test::forward_ring;
using wm::test::frames;
using wm::test::max_abs_diff;

namespace seedvr2 = wm::models::seedvr2;
using wm::Planar;
using wm::RunContext;

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/";

at::Tensor read_tensor(const std::string& file, const std::string& name) {
  wm::io::SafetensorsFile f(kGolden + file);
  const wm::io::TensorInfo& info = f.info(name);
  at::Tensor t = at::empty(info.shape, at::kFloat);
  std::memcpy(t.data_ptr(), info.data, info.bytes);
  return t;
}

seedvr2::Architecture tiny_arch() {
  seedvr2::Architecture arch;
  arch.channels = {16, 32, 64, 64};
  arch.norm_groups = 4;
  return arch;
}

// The tiny network in float64 (decoder or encoder).
std::unique_ptr<seedvr2::Network> float64_network(bool decoder) {
  wm::io::SafetensorsFile weights(kGolden + "weights.safetensors");
  return std::make_unique<seedvr2::Network>(tiny_arch(), decoder, [&](const std::string& key) {
    const auto& info = weights.info(key);
    at::Tensor t = at::empty(info.shape, at::kFloat);
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    return t.to(at::kDouble);
  });
}

std::string label_of(const std::vector<std::vector<int>>& slices) {
  std::string label;
  for (const auto& slice : slices) {
    label += "[";
    for (int k : slice) label += std::to_string(k) + " ";
    label += "]";
  }
  return label;
}

using Run = std::function<at::Tensor(const at::Tensor&, seedvr2::StreamState&, bool)>;

// `x` through `net` whole and as each case's ring of ranks (each rank's part run by `run`).
void check_float64(const seedvr2::Network& net, const at::Tensor& x,
                   const std::vector<std::vector<std::vector<int>>>& cases, const Run& run,
                   const std::string& what) {
  seedvr2::StreamState whole_state;
  const at::Tensor whole = net.forward(x, whole_state, true);
  for (const auto& slices : cases) {
    wm::parallel::InProcessGroup group(4);
    const at::Tensor got = forward_ring<seedvr2::StreamState>(x, slices, group, run);
    ASSERT_TRUE(got.defined()) << label_of(slices);
    ASSERT_EQ(got.sizes(), whole.sizes()) << label_of(slices);
    const double err = (got - whole).abs().max().item<double>();
    std::cout << "[ ranks    ] float64 " << what << " " << label_of(slices) << ": max diff " << err
              << "\n";
    EXPECT_LE(err, 1e-12) << what << " " << label_of(slices);
  }
}

// decode_t5's latents, cropped to 4×4 (float64 convolutions are slow on the CPU).
at::Tensor float64_latents() {
  return read_tensor("decode_t5.safetensors", "latent")
      .narrow(3, 0, 4)
      .narrow(4, 0, 4)
      .to(at::kDouble);
}

TEST(SeedVR2SequenceParallel, Float64RanksEqualOneDevice) {
  c10::InferenceMode inference;
  const auto net = float64_network(true);
  check_float64(
      *net, float64_latents(),
      {
          {{2, 3}},               // 2 ranks, uneven
          {{1, 4}},               // rank 0 holds only the first latent frame
          {{1, 1}, {2, 1}},       // two slices: the memory goes around the ring
          {{1}, {1, 1}, {1, 1}},  // a slice run alone, then the ring, slices of 1-2
          {{1, 1, 1}, {1, 1}},    // 3 ranks, then 2
      },
      [&](const at::Tensor& part, seedvr2::StreamState& st, bool first) {
        return net->forward(part, st, first);
      },
      "decode");
}

TEST(SeedVR2SequenceParallel, Float64RanksInTimeChunksAndPhases) {
  // A rank's stages cut into single frames (each conv takes its memory before its first chunk
  // and hands it on after its last), and a rank decoding in 2 and 4 phases (the top levels over
  // a spool of the lower ones' output).
  c10::InferenceMode inference;
  const auto net = float64_network(true);
  check_float64(
      *net, float64_latents(), {{{1, 1}, {1, 2}}},
      [&](const at::Tensor& part, seedvr2::StreamState& st, bool first) {
        std::vector<at::Tensor> parts;
        net->forward_chunks(part, st, first, 1, [&](const at::Tensor& y) { parts.push_back(y); });
        return at::cat(parts, 2);
      },
      "decode, chunks of one frame");
  for (int phases : {2, 4}) {
    check_float64(
        *net, float64_latents(), {{{2, 3}}},
        [&](const at::Tensor& part, seedvr2::StreamState& st, bool first) {
          std::vector<at::Tensor> parts;
          net->forward_phased(part, st, first, net->phase_starts(phases), {1},
                              [&](const at::Tensor& y) { parts.push_back(y); });
          return at::cat(parts, 2);
        },
        "decode, " + std::to_string(phases) + " phases");
  }
}

TEST(SeedVR2SequenceParallel, Float64EncoderRanksEqualOneDevice) {
  // The encoder split in time: every part whole temporal downsampling windows (rank 0 of the
  // first slice 1 + 4k frames, every other part 4k), its stride-2 convs' memory around the ring.
  c10::InferenceMode inference;
  const auto net = float64_network(false);
  const at::Tensor video = read_tensor("encode_t17.safetensors", "video")
                               .narrow(3, 0, 16)
                               .narrow(4, 0, 16)
                               .to(at::kDouble);
  check_float64(
      *net, video,
      {
          {{5, 4, 8}},         // 3 ranks, one slice
          {{1, 4}, {4, 8}},    // rank 0 holds only the first frame
          {{5}, {4, 4}, {4}},  // a slice run alone, then the ring
          {{1, 4, 4, 8}},      // 4 ranks
      },
      [&](const at::Tensor& part, seedvr2::StreamState& st, bool first) {
        return net->forward(part, st, first);
      },
      "encode");
}

// --- float32, sessions ------------------------------------------------------------------------

wm::ModelConfig tiny_config(const std::string& task, const std::string& tuning = "") {
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = task;
  config.weights = kGolden + "weights.safetensors";
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).norm_groups = 4;
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).logvar = task == "encode";
  config.tuning = tuning;
  return config;
}

// `input` through `ranks` ranks in slices `sizes` (split per rank: `split`), each slice taken
// after the next was queued when `shaped` (the ranks then write into the slice's output).
Planar run_ranks(const wm::Model& model, int ranks, const std::vector<int>& split,
                 const Planar& input, const std::vector<int>& sizes,
                 std::shared_ptr<const wm::Model> shaped, wm::parallel::ExchangeStats* stats) {
  std::vector<std::unique_ptr<wm::ModelSession>> sessions;
  std::vector<wm::parallel::DeviceWorker*> workers;
  for (int r = 0; r < ranks; ++r) {
    sessions.push_back(model.open_session(wm::Device{}));
    workers.push_back(&wm::parallel::device_worker(wm::Device{}, r));
  }
  wm::parallel::SequenceParallelOptions options;
  options.split = split;
  if (shaped) {
    wm::parallel::fit_to_model(options, shaped);
  } else {
    options.frame_group = model.traits().frame_group;
    options.frame_offset = model.traits().frame_offset;
  }
  wm::parallel::SequenceParallelSession session(std::move(sessions), std::move(workers), options);
  Planar out = wm::test::run_in_slices(session, input, sizes, shaped != nullptr);
  if (stats) *stats = session.exchange_stats();
  return out;
}

Planar golden_planar(const std::string& file, const std::string& name) {
  const at::Tensor t = read_tensor(file, name);
  Planar p(int(t.size(1)), int(t.size(2)), int(t.size(3)), int(t.size(4)));
  std::memcpy(p.data.data(), t.data_ptr(), p.data.size() * sizeof(float));
  return p;
}

TEST(SeedVR2SequenceParallel, SessionsEqualOneDevice) {
  const Planar z = golden_planar("decode_t5.safetensors", "latent");
  struct Case {
    int ranks;
    std::vector<int> split;
    std::vector<int> slices;
  };
  // The whole slice at once, and (tuning) every rank's stages cut into chunks of one frame.
  for (const std::string tuning : {"", "work_mib=1"}) {
    std::shared_ptr<const wm::Model> model =
        wm::models::make_seedvr2_vae(tiny_config("decode", tuning), wm::Device{});
    EXPECT_TRUE(model->traits().sequence_parallel);
    const Planar whole = model->open_session(wm::Device{})->run(frames(z, 0, 5), RunContext{});
    const std::vector<Case> cases =
        tuning.empty() ? std::vector<Case>{Case{2, {}, {5}}, Case{3, {1, 1, 1}, {3, 2}},
                                           Case{2, {}, {1, 2, 2}}, Case{4, {}, {4, 1}}}
                       : std::vector<Case>{Case{3, {1, 1, 1}, {3, 2}}, Case{4, {}, {4, 1}}};
    for (const Case& c : cases) {
      for (bool into : {false, true}) {
        wm::parallel::ExchangeStats stats;
        const double err = max_abs_diff(
            run_ranks(*model, c.ranks, c.split, z, c.slices, into ? model : nullptr, &stats),
            whole);
        std::cout << "[ ranks    ] float32 decode " << (tuning.empty() ? "" : tuning + " ")
                  << c.ranks << " ranks, " << c.slices.size() << " slices"
                  << (into ? ", in place, overlapped" : "") << ": max diff " << err
                  << ", exchanged " << stats.bytes << " bytes\n";
        EXPECT_LE(err, 1e-5);
        EXPECT_GT(stats.messages, 0);
      }
    }
  }
}

TEST(SeedVR2SequenceParallel, EncoderSessionsEqualOneDevice) {
  const Planar video = golden_planar("encode_t17.safetensors", "video");
  std::shared_ptr<const wm::Model> model =
      wm::models::make_seedvr2_vae(tiny_config("encode"), wm::Device{});
  EXPECT_TRUE(model->traits().sequence_parallel);
  const Planar whole = model->open_session(wm::Device{})->run(frames(video, 0, 17), RunContext{});
  struct Case {
    int ranks;
    std::vector<int> slices;
  };
  // Slices of whole windows; each slice's parts whole windows too (split in groups of 4).
  for (const Case& c : {Case{2, {17}}, Case{3, {9, 8}}, Case{4, {1, 8, 8}}, Case{2, {5, 8, 4}}}) {
    wm::parallel::ExchangeStats stats;
    const double err =
        max_abs_diff(run_ranks(*model, c.ranks, {}, video, c.slices, model, &stats), whole);
    std::cout << "[ ranks    ] float32 encode " << c.ranks << " ranks, " << c.slices.size()
              << " slices: max diff " << err << ", exchanged " << stats.bytes << " bytes\n";
    EXPECT_LE(err, 1e-5);
    EXPECT_GT(stats.messages, 0);
  }
}

}  // namespace
