// SeedVR2's DiT split over ranks inside one forward (src/models/seedvr2/torch/seedvr2_dit_split.h):
// in-process CPU ranks (threads, one InProcessGroup) each run whole windows and return the whole
// output, which must be one device's bit for bit, on the golden tiny network and on random
// weights of a wider grid; the text stream (every block's) too; too many ranks for the windows is
// one clear error on every rank, and no rank waits.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "parallel/halo_inprocess.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"
#include "src/models/seedvr2/seedvr2_dit_layout.h"
#include "src/models/seedvr2/torch/seedvr2_dit.h"
#include "src/models/torch/weights_file.h"

namespace seedvr2 = wm::models::seedvr2;
using wm::models::WeightsFile;

namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-dit-tiny/";

at::Tensor read(const WeightsFile& file, const std::string& name) {
  const wm::io::TensorInfo* t = file.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? wm::models::host_tensor(*t) : at::Tensor();
}

std::unique_ptr<seedvr2::DitNetwork> golden_network() {
  const WeightsFile file(kGolden + "weights.safetensors");
  const seedvr2::DitArchitecture arch = seedvr2::infer_dit_architecture(
      [&file](const std::string& key) -> const std::vector<int64_t>* {
        const wm::io::TensorInfo* t = file.find(key);
        return t ? &t->shape : nullptr;
      },
      0);
  seedvr2::DitParams params;
  for (const auto& [key, info] : file.tensors()) params[key] = wm::models::host_tensor(info);
  return std::make_unique<seedvr2::DitNetwork>(arch, params, seedvr2::DitOptions{});
}

struct RankResult {
  at::Tensor output;
  std::map<std::string, at::Tensor> probed;
  std::string error;
};

// Runs `forward(exchange, probe)` on `ranks` threads of one in-process group.
std::vector<RankResult> run_ranks(
    int ranks,
    const std::function<at::Tensor(wm::exec::HaloExchange&, const seedvr2::DitProbe&)>& forward) {
  wm::parallel::InProcessGroup group(ranks, std::chrono::seconds(120));
  group.begin(ranks);
  std::vector<RankResult> results(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      c10::InferenceMode inference;
      RankResult& out = results[size_t(r)];
      try {
        out.output = forward(group.rank(r), [&out](const std::string& n, const at::Tensor& x) {
          out.probed[n] = x.clone();
        });
      } catch (const std::exception& e) {
        out.error = e.what();
        group.abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

}  // namespace

// The golden cases with windows enough: every rank's output and every block's text stream equal
// one device's, for 2 and 3 ranks.
TEST(SeedVR2DitSplit, RanksGiveOneDevicesOutputOnTheGoldenNetwork) {
  const auto net = golden_network();
  int compared = 0;
  for (const char* name : {"dit_t5_h8w12", "dit_t2_h36w50"}) {
    const WeightsFile file(kGolden + name + ".safetensors");
    const at::Tensor vid = read(file, "vid"), txt = read(file, "txt");
    const double ts = read(file, "timestep").item<double>();
    std::map<std::string, at::Tensor> one_probed;
    const at::Tensor one =
        net->forward(vid, txt, ts,
                     [&](const std::string& n, const at::Tensor& x) { one_probed[n] = x.clone(); });
    for (int ranks : {2, 3}) {
      const auto results = run_ranks(ranks, [&](wm::exec::HaloExchange& ex, const auto& probe) {
        return net->forward(vid, txt, ts, probe, nullptr, &ex);
      });
      for (int r = 0; r < ranks; ++r) {
        const RankResult& got = results[size_t(r)];
        ASSERT_EQ(got.error, "") << name << " rank " << r << " of " << ranks;
        EXPECT_TRUE(at::equal(got.output, one))
            << name << " rank " << r << " of " << ranks << ": max difference "
            << (got.output - one).abs().max().item<double>();
        int texts = 0;
        for (const auto& [n, x] : got.probed) {
          EXPECT_EQ(n.find("vid"), std::string::npos) << n;  // a rank holds part of the video
          ASSERT_TRUE(one_probed.count(n)) << n;
          EXPECT_TRUE(at::equal(x, one_probed.at(n))) << name << " " << n << " rank " << r;
          texts += n.find("_txt") != std::string::npos;
        }
        EXPECT_EQ(texts, net->arch().layers) << name;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 4);
}

// A wider grid on random weights of a 3B-like network with windows of several shapes in both
// layouts (regular and shifted): 2, 4 and 5 ranks (an uneven split) give one device's output.
TEST(SeedVR2DitSplit, RanksGiveOneDevicesOutputOnAWiderGrid) {
  seedvr2::DitArchitecture arch = seedvr2::DitArchitecture::official_3b();
  arch.dim = 64, arch.heads = 2, arch.head_dim = 32, arch.layers = 4, arch.mm_layers = 2;
  arch.mlp_hidden = 128, arch.rope_freqs = 5, arch.txt_in_dim = 16;
  const seedvr2::DitNetwork net(arch, seedvr2::random_dit_params(arch, 11), {});
  // A latent frame of 90 × 160 (720p output): a 1 × 45 × 80 token grid, 3 × 3 windows.
  const at::Tensor vid = at::randn({1, 90, 160, 33}, at::TensorOptions().dtype(at::kFloat));
  const at::Tensor txt = at::randn({5, 16});
  ASSERT_GE(seedvr2::dit_windows(1, 45, 80, false).size(), 5u);
  ASSERT_GE(seedvr2::dit_windows(1, 45, 80, true).size(), 5u);
  const at::Tensor one = net.forward(vid, txt, 1000.0);
  for (int ranks : {2, 4, 5}) {
    const auto results = run_ranks(ranks, [&](wm::exec::HaloExchange& ex, const auto&) {
      return net.forward(vid, txt, 1000.0, {}, nullptr, &ex);
    });
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(results[size_t(r)].error, "") << "rank " << r << " of " << ranks;
      EXPECT_TRUE(at::equal(results[size_t(r)].output, one)) << "rank " << r << " of " << ranks;
    }
  }
}

// More ranks than windows: every rank fails with the same one-line error, before any message.
TEST(SeedVR2DitSplit, MoreRanksThanWindowsIsOneError) {
  const auto net = golden_network();
  const WeightsFile file(kGolden + "dit_t1_h8w12.safetensors");
  const at::Tensor vid = read(file, "vid"), txt = read(file, "txt");
  const size_t windows = seedvr2::dit_windows(1, 4, 6, false).size();
  const int ranks = int(windows) + 1;
  const auto results = run_ranks(ranks, [&](wm::exec::HaloExchange& ex, const auto&) {
    return net->forward(vid, txt, 1000.0, {}, nullptr, &ex);
  });
  for (const RankResult& r : results) {
    EXPECT_NE(r.error.find("seedvr2 dit: " + std::to_string(ranks) + " ranks for"),
              std::string::npos)
        << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
}
