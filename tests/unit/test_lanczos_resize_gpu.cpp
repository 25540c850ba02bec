// The Lanczos resize's banded pass on a CUDA device (src/models/kernels/resize_kernels.cu) against
// the CPU's matrix products (label gpu; skipped without a GPU): the ratios a Real-ESRGAN job's
// `scale:` gives (×4 network to scale 2, 1 and 3; ×2 to 1) and odd sizes, within 1e-5.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <tuple>
#include <vector>

#include "src/models/resample/torch/lanczos_resize.h"

namespace wm::models {
namespace {

TEST(LanczosResizeGpu, BandedMatchesTheCpuMatrix) {
  if (static_cast<int>(torch::cuda::device_count()) == 0) GTEST_SKIP() << "no CUDA device";
  at::manual_seed(3);
  for (const auto& [h, w, oh, ow] :
       std::vector<std::tuple<int, int, int, int>>{{96, 128, 48, 64},
                                                   {96, 128, 24, 32},
                                                   {96, 128, 72, 96},
                                                   {37, 53, 18, 26},
                                                   {40, 60, 80, 120},
                                                   {432, 768, 216, 384}}) {
    const at::Tensor x = at::rand({2, 3, h, w});
    const at::Tensor cpu = lanczos_resize(x, oh, ow);
    const at::Tensor gpu = lanczos_resize(x.to(at::kCUDA), oh, ow).cpu();
    ASSERT_EQ(gpu.sizes(), cpu.sizes());
    EXPECT_LE((gpu - cpu).abs().max().item<double>(), 1e-5) << h << "x" << w << " -> " << oh;
    // Half in, half out (the device keeps the dtype).
    const at::Tensor half = lanczos_resize(x.to(at::kCUDA).to(at::kHalf), oh, ow);
    EXPECT_EQ(half.scalar_type(), at::kHalf);
    EXPECT_LE((half.to(at::kFloat).cpu() - cpu).abs().max().item<double>(), 4e-3);
  }
}

}  // namespace
}  // namespace wm::models
