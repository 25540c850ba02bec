// Real-ESRGAN on a CUDA device (label gpu; skipped without one): the golden cases in fp32 (TF32
// off) within 1e-4, and fp16 / bf16 within the spec's tolerances (1e-2, 6e-2), with their PSNR
// against the float64 reference printed for docs/models.md.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>

#include "src/model.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/weights/safetensors.h"

namespace wm::models {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/";

bool have_gpu() { return static_cast<int>(torch::cuda::device_count()) > 0; }

Planar load_frames(const std::string& path, const std::string& name) {
  io::SafetensorsFile file(path);
  const io::TensorInfo& t = file.info(name);  // [1, 3, H, W] F32
  Planar p(3, 1, int(t.shape[2]), int(t.shape[3]));
  std::memcpy(p.data.data(), t.data, t.bytes);
  return p;
}

struct Gap {
  double max_abs = 0;
  double psnr = 0;  // peak 1.0
};

Gap compare(const Planar& got, const Planar& want) {
  EXPECT_EQ(got.data.size(), want.data.size());
  Gap g;
  double se = 0;
  for (size_t i = 0; i < std::min(got.data.size(), want.data.size()); ++i) {
    const double d = double(got.data[i]) - want.data[i];
    g.max_abs = std::max(g.max_abs, std::fabs(d));
    se += d * d;
  }
  g.psnr = 10 * std::log10(double(got.data.size()) / std::max(se, 1e-30));
  return g;
}

TEST(RealEsrganGpu, GoldenCasesPerPrecision) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu{Device::Kind::kCuda, 0};
  struct Case {
    const char* model;
    const char* name;
  };
  const Case cases[] = {{"srvgg-tiny", "case_b"},
                        {"srvgg-x2-tiny", "case_b"},
                        {"rrdb-tiny", "case_b"},
                        {"rrdb-x2-tiny", "case_b"},
                        {"rrdb-x2-tiny", "case_c"}};
  const std::pair<Precision, double> precisions[] = {
      {Precision::kFloat32, 1e-4}, {Precision::kFloat16, 1e-2}, {Precision::kBFloat16, 6e-2}};
  for (const auto& [precision, tolerance] : precisions) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.model) + " " + c.name + " " + to_string(precision));
      ModelConfig config;
      config.kind = "realesrgan";
      config.weights = kGolden + c.model + "/model.pth";
      config.precision = precision;
      const auto model = make_realesrgan(config, gpu);
      const std::string file = kGolden + c.model + "/" + c.name + ".safetensors";
      const Planar out = model->open_session(gpu)->run(load_frames(file, "input"), RunContext{});
      const Gap gap = compare(out, load_frames(file, "output"));
      EXPECT_LE(gap.max_abs, tolerance);
      std::cout << "[realesrgan gpu] " << c.model << " " << c.name << " " << to_string(precision)
                << " max_abs " << gap.max_abs << " psnr " << gap.psnr << " dB\n";
    }
  }
}

// Real-looking content: gradients, hard-edged bars, a soft disc and mild noise, in 0..1.
Planar test_picture(int width, int height) {
  Planar p(3, 1, height, width);
  uint32_t seed = 7;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        seed = seed * 1664525u + 1013904223u;
        const double dx = x - 0.6 * width, dy = y - 0.4 * height;
        const double disc = std::exp(-(dx * dx + dy * dy) / (0.05 * width * height));
        const double bar = ((x / 11 + y / 17 + c) % 3) * 0.15;
        const double v = 0.1 + 0.4 * x / width * (c + 1) / 3 + 0.2 * y / height + bar + 0.2 * disc +
                         0.03 * (double(seed >> 24) / 255 - 0.5);
        p.plane(c, 0)[size_t(y) * width + x] = float(std::clamp(v, 0.0, 1.0));
      }
    }
  }
  return p;
}

// PSNR of `got` against `want` with the peak = the reference's value range (the random-weight
// full-size networks' raw outputs are not in 0..1; clamped, x4plus's would saturate).
double range_psnr(const Planar& got, const Planar& want) {
  const auto [lo, hi] = std::minmax_element(want.data.begin(), want.data.end());
  const double range = std::max(double(*hi - *lo), 1e-12);
  double se = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double d = double(got.data[i]) - want.data[i];
    se += d * d;
  }
  return 10 * std::log10(range * range * double(want.data.size()) / std::max(se, 1e-30));
}

// The full-size architectures (random weights) on real-looking content: fp16 / bf16 against fp32
// (raw outputs, PSNR over the reference's range), through the fused kernels with each
// convolution choice (tuning conv=fused, the default: cuDNN's graph with our epilogue for the
// 64-channel convolutions, our kernel for RRDB's convs 1–4; conv=own: our 3×3 kernel for SRVGG's
// body and RRDB's convs 1–4; conv=own-all: RRDB's conv5 too; conv=cudnn) and through ATen
// (tuning fused=0); the floors of
// docs/models.md. Every fused path must agree with ATen's ops to the run dtype's rounding.
TEST(RealEsrganGpu, HalfPrecisionPsnrFullSize) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Device gpu{Device::Kind::kCuda, 0};
  struct Net {
    const char* name;
    int width, height;
    double floor_fp16, floor_bf16;
  };
  // Measured on an H200 (docs/models.md): fp16 71.6 / 72.0 / 78.2 dB, bf16 55.0 / 54.6 / 62.2.
  const Net nets[] = {{"realesr-animevideov3", 192, 128, 60, 45},
                      {"RealESRGAN_x4plus", 96, 64, 60, 45},
                      {"RealESRGAN_x2plus", 96, 64, 60, 45}};
  for (const Net& n : nets) {
    const RealEsrganArch arch = realesrgan_preset(n.name);
    auto run = [&](Precision precision, const std::string& tuning) {
      ModelConfig config;
      config.kind = "realesrgan";
      config.precision = precision;
      config.tuning = tuning;
      const auto model = make_realesrgan_random(arch, config, gpu, 1234);
      return model->open_session(gpu)->run(test_picture(n.width, n.height), RunContext{});
    };
    const Planar ref = run(Precision::kFloat32, "");
    for (const Precision precision : {Precision::kFloat16, Precision::kBFloat16}) {
      const Planar aten = run(precision, "fused=0");
      ASSERT_EQ(aten.data.size(), ref.data.size());
      const double p_aten = range_psnr(aten, ref);
      const double floor = precision == Precision::kFloat16 ? n.floor_fp16 : n.floor_bf16;
      EXPECT_GE(p_aten, floor) << n.name << " " << to_string(precision);
      for (const char* conv : {"fused", "own", "own-all", "cudnn"}) {
        const Planar fused = run(precision, std::string("fused=1,conv=") + conv);
        ASSERT_EQ(fused.data.size(), ref.data.size());
        const double p_fused = range_psnr(fused, ref);
        const double between = range_psnr(fused, aten);
        const auto [lo, hi] = std::minmax_element(ref.data.begin(), ref.data.end());
        std::cout << "[realesrgan gpu] " << n.name << " " << n.width << "x" << n.height << " "
                  << to_string(precision) << " vs fp32 (range " << *lo << ".." << *hi
                  << "): fused conv=" << conv << " psnr " << p_fused << " dB, aten psnr " << p_aten
                  << " dB; fused vs aten " << between << " dB\n";
        EXPECT_GE(p_fused, floor) << n.name << " " << to_string(precision) << " conv=" << conv;
        // The fused path may round differently, never worse than the precision itself allows.
        EXPECT_GE(between, floor) << n.name << " " << to_string(precision) << " conv=" << conv;
      }
    }
  }
}

}  // namespace
}  // namespace wm::models
