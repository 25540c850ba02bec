// The built-in resampler as LibTorch convolutions (resample.h: resample_torch), for GPUs. On the
// LibTorch side (src/models/torch_side.h): the CPU resampler in resample.cpp needs no LibTorch.
#include <ATen/ATen.h>

#include "src/exec/search_gate_torch.h"
#include "src/models/resample/resample.h"
#include "src/models/resample/torch/resample_conv.h"
#include "src/models/torch/tensor.h"

namespace wm::models {
namespace {

// One separable pass over x [N, 1, H, W]: along W (`vertical` false) → [N, 1, H, W*scale], or
// along H → [N, 1, H*scale, W]. The input is edge-replicated by `pad` pixels so that border
// pixels use clamped indices, the same rule as the direct formula and as swscale. The `scale`
// output phases come out as channels of one conv and are interleaved by a reshape.
at::Tensor upsample_axis(const at::Tensor& x, const at::Tensor& kernel, int scale, int pad,
                         bool vertical) {
  const auto n = x.size(0), h = x.size(2), w = x.size(3);
  const at::Tensor padded = at::replication_pad2d(
      x, vertical ? at::IntArrayRef{0, 0, pad, pad} : at::IntArrayRef{pad, pad, 0, 0});
  at::Tensor phases;
  {
    const exec::SearchPass pass = exec::conv_search_pass(padded, kernel, {0, 0});
    phases = at::conv2d(padded, kernel);
  }
  if (!vertical) return phases.permute({0, 2, 3, 1}).reshape({n, 1, h, w * scale});
  return phases.permute({0, 2, 1, 3}).reshape({n, 1, h * scale, w});
}

}  // namespace

at::Tensor resample_weights(const ResampleKernel& k, const at::Device& device) {
  at::Tensor weights = at::empty({k.scale, 1, 1, k.taps}, at::kDouble);
  auto acc = weights.accessor<double, 4>();
  for (int p = 0; p < k.scale; ++p) {
    for (int i = 0; i < k.taps; ++i) acc[p][0][0][i] = k.weights[p][i];
  }
  return weights.to(device, at::kFloat);
}

at::Tensor resample_planes(const ResampleKernel& k, const at::Tensor& weights,
                           const at::Tensor& planes) {
  const at::Tensor vertical = weights.view({k.scale, 1, k.taps, 1});
  const at::Tensor wide = upsample_axis(planes, weights, k.scale, -k.offset, false);
  return upsample_axis(wide, vertical, k.scale, -k.offset, true);
}

Planar resample_torch(const ResampleKernel& k, Planar&& input, const Device& device) {
  return guarded("resample", [&] {
    const int c = input.channels, t = input.frames, h = input.height, w = input.width;
    const at::Device dev = to_device(device);
    const at::Tensor weights = resample_weights(k, dev);
    at::Tensor x = to_tensor(std::move(input)).to(dev).view({c * t, 1, h, w});
    at::Tensor out = resample_planes(k, weights, x);
    return to_planar(out.view({c, t, h * k.scale, w * k.scale}));
  });
}

}  // namespace wm::models
