// SeedVR2's pixel-space steps around the networks (../shared/seedvr2-dit-spec.md §9): the
// antialiased bicubic resize of its preprocessing and the colour fixes after decoding. ATen ops
// on any device, float32.
//
// Internal to src/models/ (seedvr2_upscale.cpp, tests).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace wm::models::seedvr2 {

// Resizes x [N, C, H, W] to h × w with the antialiased bicubic filter (a = −0.5, PIL-style:
// the support widened by the downscale factor, taps cut at the borders and renormalised), as
// torchvision's resize of tensors with antialias on. Separable; float32.
at::Tensor resize_bicubic_aa(const at::Tensor& x, int64_t h, int64_t w);

// Wavelet colour fix: the detail of `content` (x minus its low band after five dilated 3×3
// binomial blurs, dilations 1, 2, 4, 8, 16, edges replicated) on the low band of `style`.
// Both [N, 3, H, W] float32.
at::Tensor wavelet_color_fix(const at::Tensor& content, const at::Tensor& style);

// AdaIN colour fix: per frame and channel, content normalised to its mean and standard deviation
// (unbiased variance + 1e-5) and given the style's.
at::Tensor adain_color_fix(const at::Tensor& content, const at::Tensor& style);

}  // namespace wm::models::seedvr2
