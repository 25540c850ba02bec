// Built-in spatial upscalers (lanczos a=3, bicubic a=-0.5) for integer scales 2, 3, 4,
// separable, exact halo (tiles with the halo equal the untiled result). Torch-free on the CPU
// (resample.cpp); on a GPU the model is the LibTorch side's (torch/resample_frames.cpp, made
// through src/models/torch_side.h), which also takes frames already on its device (the device
// frame path of video jobs) and computes with resample_torch's convolutions.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
// The traits of the resampler `kind` with `kernel` (both implementations of the model: the
// torch-free one here, and on a GPU the one that also takes frames on its device,
// resample_frames.cpp).
ModelTraits resampler_traits(const std::string& kind, const ResampleKernel& kernel);
// The two implementations behind the model (exposed for tests and benchmarks). Both edge-clamp.
// resample_cpu: hand-written separable passes, threaded over rows; every output value is the
// same sequence of float operations wherever its tile starts, so tiles reproduce the untiled
// result bit for bit. resample_torch: the same filter as LibTorch convolutions (used on CUDA,
// where cuDNN makes it fast); on this machine's CPU LibTorch it measured 10-40x slower. It is
// defined on the LibTorch side: only code linked with it (tests, benchmarks) calls it directly.
Planar resample_cpu(const ResampleKernel& kernel, Planar&& input);
Planar resample_torch(const ResampleKernel& kernel, Planar&& input, const Device& device);

// The kernel function itself (lanczos3 or bicubic a=-0.5) at distance x.
double resample_weight(const std::string& kind, double x);

}  // namespace wm::models
