// Lanczos-3 resize of float images to any size (the built-in resampler only enlarges by 2, 3 or
// 4): how a network's output is brought to a `scale:` other than its own, as the official
// `--outscale` does with OpenCV's Lanczos. Downscaling widens the kernel by the ratio
// (antialiased, as PIL and swscale do); borders are edge-clamped. Every output value depends only
// on input values within `lanczos_resize_reach` source pixels of its centre, so tiles with that
// much halo reproduce the whole-frame result (up to float rounding of the matrix products).
// On a GPU each axis is one banded pass (src/models/kernels/resize_kernels.cu: every output reads
// only its taps), with the same weights as the CPU's matrix products
// (tests/unit/test_lanczos_resize_gpu.cpp compares them).
#pragma once

#include <ATen/ATen.h>

namespace wm::models {

// x [N, C, H, W] (any float dtype, any device) → [N, C, out_height, out_width], same dtype.
at::Tensor lanczos_resize(const at::Tensor& x, int out_height, int out_width);
// Source pixels on each side an output value reads when resizing by out/in.
int lanczos_resize_reach(double out_per_in);

}  // namespace wm::models
