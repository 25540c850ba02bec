#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "src/models/resample.h"

namespace wm::models {
namespace {

// The direct formula: each output pixel is a normalised weighted sum of the input pixels under
// the kernel centred on its position, with indices clamped at the borders. Computed in double.
std::vector<double> direct_1d(const std::vector<double>& in, const std::string& kind, int scale) {
  const int n = int(in.size());
  const double radius = kind == "lanczos" ? 3 : 2;
  std::vector<double> out(n * scale);
  for (int x = 0; x < n * scale; ++x) {
    const double centre = (x + 0.5) / scale - 0.5;
    double sum = 0, wsum = 0;
    for (int j = int(std::floor(centre - radius)); j <= int(std::ceil(centre + radius)); ++j) {
      const double w = resample_weight(kind, centre - j);
      sum += w * in[std::clamp(j, 0, n - 1)];
      wsum += w;
    }
    out[x] = sum / wsum;
  }
  return out;
}

Planar random_planar(int c, int t, int h, int w, unsigned seed) {
  Planar p(c, t, h, w);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (float& v : p.data) v = u(rng);
  return p;
}

TEST(ResampleWeight, KernelShapes) {
  EXPECT_DOUBLE_EQ(resample_weight("lanczos", 0), 1.0);
  EXPECT_NEAR(resample_weight("lanczos", 1), 0.0, 1e-12);
  EXPECT_NEAR(resample_weight("lanczos", 2), 0.0, 1e-12);
  EXPECT_EQ(resample_weight("lanczos", 3.0), 0.0);
  EXPECT_LT(resample_weight("lanczos", 1.5), 0.0);  // negative lobe
  EXPECT_DOUBLE_EQ(resample_weight("bicubic", 0), 1.0);
  EXPECT_NEAR(resample_weight("bicubic", 1), 0.0, 1e-12);
  EXPECT_NEAR(resample_weight("bicubic", 0.5), 0.5625, 1e-12);  // Catmull-Rom
  EXPECT_EQ(resample_weight("bicubic", 2.0), 0.0);
}

TEST(ResampleKernel, PhasesSumToOne) {
  for (const char* kind : {"lanczos", "bicubic"}) {
    for (int s : {2, 3, 4}) {
      ResampleKernel k = resample_kernel(kind, s);
      ASSERT_EQ(int(k.weights.size()), s);
      for (const auto& phase : k.weights) {
        double sum = 0;
        for (double w : phase) sum += w;
        EXPECT_NEAR(sum, 1.0, 1e-12);
      }
    }
  }
  EXPECT_THROW(resample_kernel("lanczos", 5), std::exception);
}

class ResampleVsFormula : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ResampleVsFormula, MatchesDirectFormula) {
  const auto [kind, scale] = GetParam();
  ModelConfig config;
  config.kind = kind;
  config.scale = scale;
  auto model = make_resampler(config);
  EXPECT_EQ(model->traits().scale_num, scale);
  EXPECT_EQ(model->traits().halo, kind == "lanczos" ? 3 : 2);
  const int c = 2, t = 2, h = 9, w = 13;
  Planar input = random_planar(c, t, h, w, 7);
  Planar copy = input.clone();
  Planar out = model->open_session(Device{})->run(std::move(input), RunContext{});
  // The LibTorch-convolution path (the one used on CUDA) computes the same filter.
  Planar via_torch = resample_torch(resample_kernel(kind, scale), copy.clone(), Device{});
  ASSERT_EQ(via_torch.data.size(), out.data.size());
  for (size_t i = 0; i < out.data.size(); ++i) ASSERT_NEAR(via_torch.data[i], out.data[i], 1e-5);
  ASSERT_EQ(out.channels, c);
  ASSERT_EQ(out.frames, t);
  ASSERT_EQ(out.height, h * scale);
  ASSERT_EQ(out.width, w * scale);
  double max_err = 0;
  for (int ch = 0; ch < c; ++ch) {
    for (int f = 0; f < t; ++f) {
      // Separable: rows first, then columns, all in double.
      std::vector<std::vector<double>> rows(h);
      for (int y = 0; y < h; ++y) {
        std::vector<double> row(copy.plane(ch, f) + y * w, copy.plane(ch, f) + (y + 1) * w);
        rows[y] = direct_1d(row, kind, scale);
      }
      for (int x = 0; x < w * scale; ++x) {
        std::vector<double> col(h);
        for (int y = 0; y < h; ++y) col[y] = rows[y][x];
        std::vector<double> expect = direct_1d(col, kind, scale);
        for (int y = 0; y < h * scale; ++y) {
          const double got = out.plane(ch, f)[y * w * scale + x];
          max_err = std::max(max_err, std::fabs(got - expect[y]));
        }
      }
    }
  }
  EXPECT_LT(max_err, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(All, ResampleVsFormula,
                         testing::Combine(testing::Values("lanczos", "bicubic"),
                                          testing::Values(2, 3, 4)));

TEST(Resample, ConstantStaysConstant) {
  ModelConfig config;
  auto model = make_resampler(config);
  Planar p(3, 1, 5, 6);
  std::fill(p.data.begin(), p.data.end(), 0.25f);
  Planar out = model->open_session(Device{})->run(std::move(p), RunContext{});
  for (float v : out.data) EXPECT_NEAR(v, 0.25f, 1e-6);
}

}  // namespace
}  // namespace wm::models
