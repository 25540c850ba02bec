// Real-ESRGAN on a CUDA device (label gpu; skipped without one): the golden cases in fp32 (TF32
// off) within 1e-4, and fp16 / bf16 within the spec's tolerances (1e-2, 6e-2), with their PSNR
// against the float64 reference printed for docs/models.md.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>

#include "io/safetensors.h"
#include "src/model.h"
#include "src/models/realesrgan.h"

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

}  // namespace
}  // namespace wm::models
