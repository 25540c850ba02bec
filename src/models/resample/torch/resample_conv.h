// The built-in resampler's two separable passes as LibTorch convolutions (resample_torch.cpp),
// shared by its Planar session and its device frames (resample_frames.cpp). Internal to
// src/models/resample/torch/.
#pragma once

#include <ATen/ATen.h>

#include "src/models/resample/resample.h"

namespace wm::models {

// The kernel's weights as the horizontal pass's convolution weights [scale, 1, 1, taps], float32
// on `device` (the vertical pass views them as [scale, 1, taps, 1]).
at::Tensor resample_weights(const ResampleKernel& kernel, const at::Device& device);
// planes [N, 1, H, W] float32 → [N, 1, H·scale, W·scale], edge-clamped; `weights` from
// resample_weights on the planes' device.
at::Tensor resample_planes(const ResampleKernel& kernel, const at::Tensor& weights,
                           const at::Tensor& planes);

}  // namespace wm::models
