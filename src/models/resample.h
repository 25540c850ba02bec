// Built-in spatial upscalers (lanczos a=3, bicubic a=-0.5) for integer scales 2, 3, 4,
// separable, implemented with LibTorch ops, exact halo (tiles with the halo equal the untiled
// result).
#pragma once

#include <memory>

#include "src/model.h"

namespace wm::models {

std::unique_ptr<Model> make_resampler(const ModelConfig& config);

// The 1-D kernel weights: for output phase p (0..scale-1) the taps applied to input pixels
// i + offset .. i + offset + taps-1 where output x = scale*i + p. Exposed for tests.
struct ResampleKernel {
  int scale = 2;
  int taps = 0;
  int offset = 0;                            // first tap relative to i (negative)
  std::vector<std::vector<double>> weights;  // [scale][taps], each row sums to 1
};
ResampleKernel resample_kernel(const std::string& kind, int scale);
// The kernel function itself (lanczos3 or bicubic a=-0.5) at distance x.
double resample_weight(const std::string& kind, double x);

}  // namespace wm::models
