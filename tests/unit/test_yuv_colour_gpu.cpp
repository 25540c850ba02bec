// The device frame path's colour conversions on a CUDA device against the same code on the CPU
// (which tests/unit/test_yuv_colour.cpp checks against libswscale), for every format the path
// takes: RGB within 1e-5, YUV samples within one level and at least 99.9 % identical (the GPU
// may fuse a multiply-add the CPU rounds twice). Label gpu; skipped without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

#include "src/models/torch/yuv_colour.h"

namespace wm::models {
namespace {

bool have_gpu() { return static_cast<int>(torch::cuda::device_count()) > 0; }

struct Format {
  int depth, shift_x, shift_y;
  bool semi;
  int sample_shift;
};

TEST(YuvColourGpu, DeviceMatchesCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  const std::vector<Format> formats = {
      {8, 1, 1, false, 0},  {8, 1, 0, false, 0},  {8, 0, 0, false, 0}, {10, 1, 1, false, 0},
      {10, 1, 0, false, 0}, {10, 0, 0, false, 0}, {8, 1, 1, true, 0},  {10, 1, 1, true, 6}};
  for (const Format& fm : formats) {
    for (YuvMatrix m : {YuvMatrix::kBt601, YuvMatrix::kBt709, YuvMatrix::kBt2020}) {
      for (bool full : {false, true}) {
        for (double siting : {0.5, 0.0}) {
          YuvFormat f;
          f.width = 198;
          f.height = 110;
          f.depth = fm.depth;
          f.shift_x = fm.shift_x;
          f.shift_y = fm.shift_y;
          f.semi_planar = fm.semi;
          f.sample_shift = fm.sample_shift;
          f.matrix = m;
          f.full_range = full;
          f.chroma_x = siting;
          SCOPED_TRACE(f.describe() + " siting " + std::to_string(siting));
          const YuvConverter cpu(f, 2, at::kCPU);
          const YuvConverter dev(f, 2, gpu);
          // Random RGB → YUV on the CPU (the input), then both directions on both devices.
          at::manual_seed(7);
          const at::Tensor rgb = at::rand({2, 3, f.height, f.width});
          const at::Tensor packed = cpu.from_rgb(rgb, true);
          const at::Tensor rgb_cpu = cpu.to_rgb(packed, at::kFloat);
          const at::Tensor rgb_dev = dev.to_rgb(packed.to(gpu), at::kFloat).cpu();
          EXPECT_LE((rgb_cpu - rgb_dev).abs().max().item<double>(), 1e-5);
          const YuvConverter cpu_out(f, 64, at::kCPU);
          const YuvConverter dev_out(f, 64, gpu);
          for (bool dither : {false, true}) {
            const at::Tensor a = cpu_out.from_rgb(rgb_cpu, dither);
            const at::Tensor b = dev_out.from_rgb(rgb_cpu.to(gpu), dither).cpu();
            // Compare only the bytes of samples (padding is unspecified): through to_rgb.
            const at::Tensor ra = cpu_out.to_rgb(a, at::kFloat);
            const at::Tensor rb = cpu_out.to_rgb(b, at::kFloat);
            const double level = 1.0 / ((1 << f.depth) - 1);
            EXPECT_LE((ra - rb).abs().max().item<double>(), 4 * level + 1e-6) << dither;
            EXPECT_GE((ra == rb).to(at::kFloat).mean().item<double>(), 0.999) << dither;
          }
        }
      }
    }
  }
}

// A 4K picture's conversions stay on the device and are quick (no host sync inside).
TEST(YuvColourGpu, FourKFramesConvertOnTheDevice) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  YuvFormat f;
  f.width = 3840;
  f.height = 2160;
  f.shift_x = f.shift_y = 1;
  const YuvConverter conv(f, 64, gpu);
  // A smooth picture (chroma subsampling keeps it): ramps across and down, unlike per channel.
  const at::TensorOptions o = at::TensorOptions().device(gpu);
  const at::Tensor x = at::linspace(0.1, 0.9, f.width, o).view({1, 1, 1, f.width});
  const at::Tensor y = at::linspace(0.2, 0.8, f.height, o).view({1, 1, f.height, 1});
  const at::Tensor rgb =
      at::cat({x.expand({4, 1, f.height, f.width}), (x * y).expand({4, 1, -1, -1}),
               y.expand({4, 1, f.height, f.width})},
              1);
  const at::Tensor packed = conv.from_rgb(rgb, true);
  EXPECT_TRUE(packed.is_cuda());
  EXPECT_EQ(packed.size(1), int64_t(conv.layout().frame_bytes));
  const at::Tensor back = conv.to_rgb(packed, at::kHalf);
  EXPECT_TRUE(back.is_cuda());
  EXPECT_LE((back.to(at::kFloat) - rgb).abs().max().item<double>(), 0.02);
}

}  // namespace
}  // namespace wm::models
