// Sequence parallelism of the SeedVR2 decoder (spec §5: rank r holds the r-th run of a slice's
// latent frames; before every causal conv it takes the conv's memory from rank r − 1; only rank
// 0 of the sequence's first slice pads by replication and drops the Upsample3D head frame) on
// in-process CPU ranks: in float64 to rounding (<= 1e-12) at the network level, in float32
// (<= 1e-5) through SequenceParallelSession; uneven splits, a rank holding only the first latent
// frame, several slices. Weights and latents: tests/data/golden/seedvr2-tiny/.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "io/safetensors.h"
#include "parallel/device_worker.h"
#include "parallel/halo_inprocess.h"
#include "parallel/sequence_parallel.h"
#include "src/models/seedvr2_blocks.h"
#include "src/models/seedvr2_vae.h"
#include "tests/support/planar_ops.h"
#include "tests/support/rank_threads.h"

namespace {

using wm::test::concat;
using wm::test::forward_ranks;
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

TEST(SeedVR2SequenceParallel, Float64RanksEqualOneDevice) {
  c10::InferenceMode inference;
  wm::io::SafetensorsFile weights(kGolden + "weights.safetensors");
  const seedvr2::Network net(tiny_arch(), true, [&](const std::string& key) {
    const auto& info = weights.info(key);
    at::Tensor t = at::empty(info.shape, at::kFloat);
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    return t.to(at::kDouble);
  });
  // decode_t5's latents, cropped to 4×4 (float64 convolutions are slow on the CPU).
  const at::Tensor x = read_tensor("decode_t5.safetensors", "latent")
                           .narrow(3, 0, 4)
                           .narrow(4, 0, 4)
                           .to(at::kDouble);
  seedvr2::StreamState whole_state;
  const at::Tensor whole = net.forward(x, whole_state, true);
  const std::vector<std::vector<std::vector<int>>> cases = {
      {{2, 3}},          // 2 ranks, uneven
      {{1, 4}},          // rank 0 holds only the first latent frame
      {{1, 1}, {2, 1}},  // two slices: the state passes from the last rank to rank 0
  };
  for (const auto& slices : cases) {
    wm::parallel::InProcessGroup group(4);
    seedvr2::StreamState state;
    std::vector<at::Tensor> outs;
    int64_t t0 = 0;
    std::string label;
    for (size_t i = 0; i < slices.size(); ++i) {
      int n = 0;
      label += "[";
      for (int k : slices[i]) {
        n += k;
        label += std::to_string(k) + " ";
      }
      label += "]";
      outs.push_back(forward_ranks(net, x.narrow(2, t0, n), state, i == 0, slices[i], group));
      t0 += n;
    }
    const at::Tensor got = at::cat(outs, 2);
    ASSERT_EQ(got.sizes(), whole.sizes()) << label;
    if (t0 < x.size(2)) continue;
    const double err = (got - whole).abs().max().item<double>();
    std::cout << "[ ranks    ] float64 " << label << ": max diff " << err << "\n";
    EXPECT_LE(err, 1e-12) << label;
  }
}

TEST(SeedVR2SequenceParallel, SessionsEqualOneDevice) {
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = "decode";
  config.weights = kGolden + "weights.safetensors";
  config.norm_groups = 4;
  auto model = wm::models::make_seedvr2_vae(config, wm::Device{});
  EXPECT_TRUE(model->traits().sequence_parallel);
  const at::Tensor latent = read_tensor("decode_t5.safetensors", "latent");
  Planar z(int(latent.size(1)), int(latent.size(2)), int(latent.size(3)), int(latent.size(4)));
  std::memcpy(z.data.data(), latent.data_ptr(), z.data.size() * sizeof(float));
  RunContext whole_ctx;
  const Planar whole = model->open_session(wm::Device{})->run(frames(z, 0, 5), whole_ctx);
  struct Case {
    int ranks;
    std::vector<int> split;
    std::vector<int> slices;
  };
  for (const Case& c : {Case{2, {}, {5}}, Case{3, {1, 1, 1}, {3, 2}}}) {
    std::vector<std::unique_ptr<wm::ModelSession>> sessions;
    std::vector<wm::parallel::DeviceWorker*> workers;
    for (int r = 0; r < c.ranks; ++r) {
      sessions.push_back(model->open_session(wm::Device{}));
      workers.push_back(&wm::parallel::device_worker(wm::Device{}, r));
    }
    wm::parallel::SequenceParallelOptions options;
    options.split = c.split;
    wm::parallel::SequenceParallelSession session(std::move(sessions), std::move(workers), options);
    std::vector<Planar> outs;
    int t0 = 0;
    for (size_t i = 0; i < c.slices.size(); ++i) {
      RunContext ctx;
      ctx.slice_index = int64_t(i);
      ctx.first_slice = i == 0;
      ctx.last_slice = i + 1 == c.slices.size();
      outs.push_back(session.run(frames(z, t0, c.slices[i]), ctx));
      t0 += c.slices[i];
    }
    const double err = max_abs_diff(concat(outs), whole);
    std::cout << "[ ranks    ] float32 " << c.ranks << " ranks, " << c.slices.size()
              << " slices: max diff " << err << ", exchanged " << session.exchange_stats().bytes
              << " bytes\n";
    EXPECT_LE(err, 1e-5);
    EXPECT_GT(session.exchange_stats().messages, 0);
  }
}

}  // namespace
