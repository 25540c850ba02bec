// Torch-level entry point of the SeedVR2 VAE's CUDA GroupNorm(+SiLU) kernel
// (src/models/kernels/seedvr2_kernels.cu). Returns false, doing nothing, when it cannot handle its
// arguments (CPU tensors, another layout, misalignment, unsupported widths, a build without
// CUDA): the caller then runs its ATen fallback. Runs on the current CUDA stream.
#pragma once

#include <ATen/ATen.h>

namespace wm::models::seedvr2::cuda {

// out = [SiLU](GroupNorm(x) · weight + bias) with statistics per frame and group (spec §2).
// x and out: [1, C, T, H, W] whose frames are each packed channels-last (a channels_last_3d
// tensor or a narrow() of one along T), the same sizes and dtype; weight, bias: [C] (any float
// dtype, any device: converted here).
bool group_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int groups,
                double eps, bool silu, const at::Tensor& out);

}  // namespace wm::models::seedvr2::cuda
