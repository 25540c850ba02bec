// The SeedVR2 upscale of one batch split over ranks inside (seedvr2_upscale_batch with a halo
// exchange): in-process CPU ranks (threads of one InProcessGroup) each run a run of the batch's
// latent frames through the VAE (the causal history around the ring) and whole windows through
// the DiT; their outputs in rank order must be one device's, bit for bit — batches of whole 4k + 1
// frames and batches padded inside (the last rank's run holding the padding), 2 and 3 ranks, each
// colour fix. Ranks beyond what a short batch can take sit it out.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "src/model.h"
#include "src/models/seedvr2/seedvr2_upscale.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/seedvr2/torch/seedvr2_dit.h"
#include "tests/support/seedvr2_ranks.h"

namespace seedvr2 = wm::models::seedvr2;
using wm::models::Seedvr2Options;

namespace {

// Tiny random networks of the golden data's sizes, upscaling to 128 × 192.
std::unique_ptr<wm::Model> tiny_model(Seedvr2Options::ColorFix fix) {
  const seedvr2::DitArchitecture dit = wm::test::tiny_seedvr2_dit();
  const seedvr2::Architecture vae = wm::test::tiny_seedvr2_vae();
  auto options = std::make_shared<Seedvr2Options>();
  options->color_fix = fix;
  options->batch_frames = 9;
  options->batch_overlap = 0;
  wm::ModelConfig config;
  config.kind = "seedvr2";
  config.task = "upscale";
  config.precision = wm::Precision::kFloat32;
  config.resolution = {128, 192};
  config.options = options;
  return wm::models::make_seedvr2_random(config, dit, vae, 5, wm::Device{}, 3);
}

wm::Planar random_frames(int frames) {
  wm::Planar p(3, frames, 64, 96);
  std::mt19937 rng{static_cast<uint32_t>(frames)};
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (float& v : p.data) v = u(rng);
  return p;
}

// Rank r's output of `frames` split over `ranks` (errors: per rank).
std::vector<wm::Planar> run_ranks(const wm::Model& model, const wm::Planar& frames, int ranks,
                                  int64_t first_frame, std::vector<std::string>& errors) {
  return wm::test::run_upscale_ranks(model, frames, ranks, first_frame, errors);
}

}  // namespace

// (colour fix, frames, ranks): 9 frames are 3 latent frames; 7 and 6 frames are padded to 9
// inside, the padding in the last rank's run (6 over 2 ranks: 5 + 4 frames, 1 of them real).
TEST(SeedVR2UpscaleSplit, RanksGiveOneDevicesFrames) {
  using Fix = Seedvr2Options::ColorFix;
  struct Case {
    Fix fix;
    int frames, ranks;
  };
  const Case cases[] = {{Fix::kWavelet, 9, 2},
                        {Fix::kWavelet, 9, 3},
                        {Fix::kWavelet, 7, 3},
                        {Fix::kWavelet, 6, 2},
                        {Fix::kAdain, 7, 2}};
  std::map<std::pair<Fix, int>, wm::Planar> one_of;  // one device's output per (fix, frames)
  std::map<Fix, std::unique_ptr<wm::Model>> models;
  int compared = 0;
  for (const Case& c : cases) {
    std::unique_ptr<wm::Model>& model = models[c.fix];
    if (!model) model = tiny_model(c.fix);
    const wm::Planar input = random_frames(c.frames);
    wm::Planar& one = one_of[{c.fix, c.frames}];
    if (one.frames == 0) {
      wm::RunContext one_ctx;
      one_ctx.first_frame = 40;
      one = wm::models::seedvr2_upscale_batch(*model, input, one_ctx);
    }
    ASSERT_EQ(one.frames, c.frames);
    ASSERT_EQ(one.height, 128);
    const std::string label =
        std::to_string(c.frames) + " frames over " + std::to_string(c.ranks) + " ranks";
    std::vector<std::string> errors;
    const std::vector<wm::Planar> parts = run_ranks(*model, input, c.ranks, 40, errors);
    int got_frames = 0;
    for (int r = 0; r < c.ranks; ++r) {
      ASSERT_EQ(errors[size_t(r)], "") << label << ", rank " << r;
      const wm::Planar& part = parts[size_t(r)];
      ASSERT_EQ(part.height, one.height);
      ASSERT_EQ(part.width, one.width);
      // Planar: channel-major [3, T, H, W]; this rank's frames against one device's.
      const size_t plane = size_t(one.height) * size_t(one.width);
      int mismatched = 0;
      for (int ch = 0; ch < 3; ++ch) {
        for (int t = 0; t < part.frames; ++t) {
          const float* a = part.data.data() + (size_t(ch) * part.frames + t) * plane;
          const float* b = one.data.data() + (size_t(ch) * one.frames + got_frames + t) * plane;
          for (size_t i = 0; i < plane; ++i) mismatched += a[i] != b[i];
        }
      }
      EXPECT_EQ(mismatched, 0) << label << ", rank " << r;
      EXPECT_GT(part.frames, 0) << label << ", rank " << r;  // each rank took part
      got_frames += part.frames;
    }
    EXPECT_EQ(got_frames, c.frames) << label;
    ++compared;
  }
  EXPECT_EQ(compared, 5);
}

// 5 frames are 2 latent frames: over 3 ranks, two take part and the third returns no frames at
// once; together they make one device's frames.
TEST(SeedVR2UpscaleSplit, RanksBeyondTheLatentFramesSitOut) {
  const auto model = tiny_model(Seedvr2Options::ColorFix::kWavelet);
  const wm::Planar input = random_frames(5);
  const wm::Planar one = wm::models::seedvr2_upscale_batch(*model, input, wm::RunContext{});
  std::vector<std::string> errors;
  const std::vector<wm::Planar> parts = run_ranks(*model, input, 3, 0, errors);
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].frames, 1);
  EXPECT_EQ(parts[1].frames, 4);
  EXPECT_EQ(parts[2].frames, 0);
  const size_t frame = size_t(one.height) * size_t(one.width);
  for (int ch = 0; ch < 3; ++ch) {
    const float* b = one.data.data() + size_t(ch) * 5 * frame;
    EXPECT_TRUE(std::equal(b, b + frame, parts[0].data.data() + size_t(ch) * frame)) << ch;
    EXPECT_TRUE(std::equal(b + frame, b + 5 * frame, parts[1].data.data() + size_t(ch) * 4 * frame))
        << ch;
  }
}
