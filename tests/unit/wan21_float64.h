// The tiny golden Wan2.1 decoder (tests/data/golden/wan21-tiny/) for the unit tests that split it
// over ranks (sequence and spatial parallelism): its tensors as ATen tensors and Planars, and the
// network with its weights widened to float64. Header-only; include from LibTorch tests.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "src/base/planar.h"
#include "src/models/wan21/torch/wan21_blocks.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tests/support/run.h"

namespace wm::test {

inline const std::string kWan21Golden =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/";

inline ModelConfig wan21_tiny_config(const std::string& task = "decode") {
  return tiny_vae_config("wan2.1-vae", task);
}

// A float32 tensor of a safetensors file, in its shape.
inline at::Tensor read_tensor(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorInfo& info = file.info(name);
  EXPECT_EQ(info.dtype, "F32");
  at::Tensor t = at::empty(info.shape, at::kFloat);
  std::memcpy(t.data_ptr(), info.data, info.bytes);
  return t;
}

// [1, C, T, H, W] → a [C, T, H, W] Planar.
inline Planar to_planar(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  Planar p(int(c.size(1)), int(c.size(2)), int(c.size(3)), int(c.size(4)));
  std::memcpy(p.data.data(), c.data_ptr(), p.data.size() * sizeof(float));
  return p;
}

// The golden weights, widened to float64.
class Float64Weights : public models::wan21::ParamSource {
 public:
  Float64Weights() : file_(kWan21Golden + "weights.safetensors") {}
  at::Tensor get(const std::string& key, const std::vector<int64_t>&) override {
    return read_tensor(file_, key).to(at::kDouble);
  }

 private:
  io::SafetensorsFile file_;
};

// The golden decoder in float64 (contiguous memory), with `tuning`.
inline std::unique_ptr<models::wan21::Network> float64_decoder(const std::string& tuning = "") {
  namespace wan21 = models::wan21;
  const wan21::Architecture arch = wan21::Architecture::from(wan21_tiny_config());
  Float64Weights weights;
  auto stat = [](const std::vector<double>& v) {
    return at::tensor(v, at::kDouble).reshape({1, -1, 1, 1, 1});
  };
  return std::make_unique<wan21::Network>(
      arch, wan21::Task::kDecode, weights, stat(models::wan21_latent_mean()),
      stat(models::wan21_latent_std()), at::MemoryFormat::Contiguous, wan21::Tuning::parse(tuning));
}

}  // namespace wm::test
