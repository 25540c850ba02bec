#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <ATen/ATen.h>

#include "src/exec/device_frames.h"
#include "src/models/resample/resample.h"
#include "src/models/resample/resample_yuv.h"
#include "src/models/torch_side.h"

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

// On a GPU a resampler job's model is the LibTorch side's, which also takes frames already on its
// device (the device frame path): made here on the CPU, its frames and its Planar sessions are
// the torch-free model's, and its traits differ only in device_frames. The registry picks it by
// device.
TEST(Resample, GpuModelTakesDeviceFramesAndGivesTheSameFrames) {
  for (const std::string kind : {"lanczos", "bicubic"}) {
    for (const int scale : {2, 3}) {
      SCOPED_TRACE(kind + " x" + std::to_string(scale));
      ModelConfig config;
      config.kind = kind;
      config.task = "upscale";
      config.scale = scale;
      const std::unique_ptr<Model> cpu = make_resampler(config);
      const std::unique_ptr<Model> gpu = torch_models().make_model(config, Device{});
      const auto* frames = dynamic_cast<const exec::DeviceFrameModel*>(gpu.get());
      ASSERT_NE(frames, nullptr);
      EXPECT_TRUE(gpu->traits().device_frames);
      EXPECT_FALSE(cpu->traits().device_frames);
      EXPECT_EQ(gpu->traits().halo, cpu->traits().halo);
      EXPECT_EQ(gpu->traits().scale_num, scale);
      EXPECT_EQ(frames->frame_dtype(), at::kFloat);
      EXPECT_EQ(frames->frames_per_call(5, 1080, 1920, 1), 5);

      const int t = 2, h = 9, w = 13;
      Planar input = random_planar(3, t, h, w, 11);
      // Planar is [C, T, H, W]; the device frames are [T, 3, H, W].
      const at::Tensor rgb = at::from_blob(input.data.data(), {3, t, h, w}, at::kFloat)
                                 .permute({1, 0, 2, 3})
                                 .contiguous();
      const at::Tensor out = frames->upscale_frames(rgb);
      ASSERT_EQ(out.sizes(), (at::IntArrayRef{t, 3, h * scale, w * scale}));
      const Planar expected = cpu->open_session(Device{})->run(input.clone(), RunContext{});
      const at::Tensor got = out.permute({1, 0, 2, 3}).contiguous();
      const float* g = got.data_ptr<float>();
      ASSERT_EQ(size_t(got.numel()), expected.data.size());
      for (size_t i = 0; i < expected.data.size(); ++i) ASSERT_NEAR(g[i], expected.data[i], 1e-5);
      const Planar session = gpu->open_session(Device{})->run(input.clone(), RunContext{});
      ASSERT_EQ(session.data.size(), expected.data.size());
      for (size_t i = 0; i < expected.data.size(); ++i) {
        ASSERT_NEAR(session.data[i], expected.data[i], 1e-5);
      }

      EXPECT_TRUE(make_model(config, Device{Device::Kind::kCuda, 0})->traits().device_frames);
      EXPECT_FALSE(make_model(config, Device{})->traits().device_frames);
    }
  }
}

TEST(Resample, ConstantStaysConstant) {
  ModelConfig config;
  auto model = make_resampler(config);
  Planar p(3, 1, 5, 6);
  std::fill(p.data.begin(), p.data.end(), 0.25f);
  Planar out = model->open_session(Device{})->run(std::move(p), RunContext{});
  for (float v : out.data) EXPECT_NEAR(v, 0.25f, 1e-6);
}

// The exact filter on a plane of samples: rows then columns through direct_1d, in double.
std::vector<double> exact_2d(const std::vector<double>& in, int h, int w, const std::string& kind,
                             int scale) {
  std::vector<std::vector<double>> rows(h);
  for (int y = 0; y < h; ++y) {
    rows[y] =
        direct_1d(std::vector<double>(in.begin() + y * w, in.begin() + (y + 1) * w), kind, scale);
  }
  std::vector<double> out(size_t(h) * scale * w * scale);
  for (int x = 0; x < w * scale; ++x) {
    std::vector<double> col(h);
    for (int y = 0; y < h; ++y) col[y] = rows[y][x];
    const std::vector<double> c = direct_1d(col, kind, scale);
    for (int y = 0; y < h * scale; ++y) out[size_t(y) * w * scale + x] = c[y];
  }
  return out;
}

// The YUV-native path's plane resampler against the exact filter (double) on random 8- and
// 10-bit planes with padded rows: every sample within 0.5 + 1e-3 levels of the exact value
// clamped to the sample range (float accumulation, then rounding), and against the float RGB
// path's resampler (resample_cpu) on the same values within one level.
class ResamplePlaneVsFormula : public testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(ResamplePlaneVsFormula, WithinHalfALevelOfTheExactFilter) {
  const auto [kind, scale, depth] = GetParam();
  const int h = 23, w = 37, pad = 5;
  const int top = (1 << depth) - 1;
  const int bytes = depth > 8 ? 2 : 1;
  std::mt19937 rng(depth * 10 + scale);
  // Mostly smooth with hard edges (overshoot and clamping) and noise.
  std::vector<double> values(size_t(h) * w);
  std::uniform_int_distribution<int> noise(-top / 16, top / 16);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int base = (x / 6 + y / 5) % 2 ? top : top / 8;
      values[size_t(y) * w + x] = std::clamp(base + noise(rng), 0, top);
    }
  }
  std::vector<uint8_t> in_bytes(size_t(h) * (w + pad) * bytes), out_bytes;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int v = int(values[size_t(y) * w + x]);
      if (bytes == 1) {
        in_bytes[size_t(y) * (w + pad) + x] = uint8_t(v);
      } else {
        reinterpret_cast<uint16_t*>(in_bytes.data())[size_t(y) * (w + pad) + x] = uint16_t(v);
      }
    }
  }
  const int ow = w * scale, oh = h * scale;
  out_bytes.assign(size_t(oh) * (ow + pad) * bytes, 0);
  SamplePlane in{in_bytes.data(), std::ptrdiff_t(w + pad) * bytes, w, h, depth};
  SamplePlane out{out_bytes.data(), std::ptrdiff_t(ow + pad) * bytes, ow, oh, depth};
  const ResampleKernel kernel = resample_kernel(kind, scale);
  resample_plane(kernel, in, out);

  const std::vector<double> exact = exact_2d(values, h, w, kind, scale);
  Planar as_float(1, 1, h, w);
  for (size_t i = 0; i < values.size(); ++i) as_float.data[i] = float(values[i] / top);
  const Planar rgb_path = resample_cpu(kernel, std::move(as_float));
  double max_exact = 0, max_rgb = 0;
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      const size_t at = size_t(y) * (ow + pad) + x;
      const double got =
          bytes == 1 ? out_bytes[at] : reinterpret_cast<const uint16_t*>(out_bytes.data())[at];
      const double want = std::clamp(exact[size_t(y) * ow + x], 0.0, double(top));
      max_exact = std::max(max_exact, std::fabs(got - want));
      const double rgb =
          std::clamp(double(rgb_path.data[size_t(y) * ow + x]) * top, 0.0, double(top));
      max_rgb = std::max(max_rgb, std::fabs(got - rgb));
    }
    // The row padding is not written.
    for (int x = ow; x < ow + pad; ++x) {
      const size_t at = size_t(y) * (ow + pad) + x;
      ASSERT_EQ(
          bytes == 1 ? out_bytes[at] : reinterpret_cast<const uint16_t*>(out_bytes.data())[at], 0);
    }
  }
  EXPECT_LE(max_exact, 0.5 + 1e-3);
  EXPECT_LE(max_rgb, 0.5 + 1e-3);
}

INSTANTIATE_TEST_SUITE_P(All, ResamplePlaneVsFormula,
                         testing::Combine(testing::Values("lanczos", "bicubic"),
                                          testing::Values(2, 3, 4), testing::Values(8, 10)));

// 8-bit planes at scale 2 take a vectorised kernel (AVX2, 8 samples at a time, where the CPU has
// it) whose contract is the portable code's float operations in the same order: every byte the
// same. Checked against that sequence written out here (vertical pass into a float row with the
// edges replicated, then the horizontal pass, clamp, + 0.5, truncate), on widths below, at and
// around multiples of 8 (the vector loops' tails) and a 1080p-wide row, with padded strides.
TEST(ResamplePlane, EightBitScaleTwoIsThePortableFloatSequence) {
  for (const std::string kind : {"lanczos", "bicubic"}) {
    const ResampleKernel k = resample_kernel(kind, 2);
    const int taps = k.taps, pad = -k.offset;
    for (const int w : {1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1920}) {
      const int h = 9, in_stride = w + 3, out_stride = 2 * w + 5;
      std::mt19937 rng(w);
      std::vector<uint8_t> in(size_t(h) * in_stride);
      // Hard edges and noise: overshoot past 0 and 255, so the clamping is exercised.
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          in[size_t(y) * in_stride + x] = ((x / 3 + y / 2) % 2 ? 250 : 5) + int(rng() % 6);
        }
      }
      std::vector<uint8_t> out(size_t(2 * h) * out_stride, 0);
      resample_plane(k, SamplePlane{in.data(), in_stride, w, h, 8},
                     SamplePlane{out.data(), out_stride, 2 * w, 2 * h, 8});
      std::vector<float> row(size_t(w) + 2 * pad);
      int differ = 0;
      for (int y = 0; y < 2 * h; ++y) {
        const int i = y / 2;
        for (int x = 0; x < w; ++x) {
          float acc = float(k.weights[y % 2][0]) *
                      float(in[size_t(std::clamp(i - pad, 0, h - 1)) * in_stride + x]);
          for (int t = 1; t < taps; ++t) {
            acc += float(k.weights[y % 2][t]) *
                   float(in[size_t(std::clamp(i + t - pad, 0, h - 1)) * in_stride + x]);
          }
          row[size_t(pad) + x] = acc;
        }
        for (int x = 0; x < pad; ++x) {
          row[x] = row[pad];
          row[size_t(pad) + w + x] = row[size_t(pad) + w - 1];
        }
        for (int x = 0; x < 2 * w; ++x) {
          const std::vector<double>& wh = k.weights[x % 2];
          float acc = float(wh[0]) * row[x / 2];
          for (int t = 1; t < taps; ++t) acc += float(wh[t]) * row[x / 2 + t];
          const auto want = uint8_t(std::min(255.0f, std::max(0.0f, acc)) + 0.5f);
          differ += out[size_t(y) * out_stride + x] != want;
        }
        for (int x = 2 * w; x < out_stride; ++x) ASSERT_EQ(out[size_t(y) * out_stride + x], 0);
      }
      EXPECT_EQ(differ, 0) << kind << " width " << w;
    }
  }
}

TEST(ResamplePlane, RefusesMismatchedPlanes) {
  std::vector<uint8_t> a(16 * 16), b(32 * 32);
  const ResampleKernel kernel = resample_kernel("lanczos", 2);
  EXPECT_THROW(resample_plane(kernel, SamplePlane{a.data(), 16, 16, 16, 8},
                              SamplePlane{b.data(), 32, 31, 32, 8}),
               std::exception);
  EXPECT_THROW(resample_plane(kernel, SamplePlane{a.data(), 16, 16, 16, 8},
                              SamplePlane{b.data(), 32, 32, 32, 10}),
               std::exception);
}

}  // namespace
}  // namespace wm::models
