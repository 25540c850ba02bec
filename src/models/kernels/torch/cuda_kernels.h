// Torch-level entry points of the Wan2.1 VAE's fused CUDA kernels
// (src/models/kernels/cuda_kernels.cu). Each returns false, doing nothing, when it cannot handle
// its arguments (CPU tensors, a layout that is not pixel-major, misaligned data, a channel count
// that is not a multiple of the vector width, a build without CUDA): the caller then runs its ATen
// fallback. Kernels run on the current CUDA stream of the tensors' device.
#pragma once

#include <ATen/ATen.h>

namespace wm::models::cuda {

// True when this build has the kernels (WMBATCH_WITH_CUDA).
bool kernels_available();

// s = x + bias + residual; out = [SiLU](s / max(‖s‖₂ over channels, eps) · gamma). x, residual,
// out and sum_out: [1, C, T, H, W] of one size, channels_last_3d or narrow() views of such
// tensors along T, H and W (a tile's crop reads in place); bias and gamma: C contiguous values
// (gamma with √C folded in). bias, residual, out, sum_out may be undefined; sum_out may be x
// itself (in place). threads_per_pixel: 0 auto, else a power of two ≤ 32 (for A/B runs).
bool rms_norm(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& residual,
              const at::Tensor& gamma, const at::Tensor& out, const at::Tensor& sum_out, bool silu,
              double eps, int threads_per_pixel = 0);

// Sub-pixel upsample epilogue (see DepthToSpaceArgs): y [1, 4C, T, H+1, W+1] → out
// [1, C, T, 2H, 2W], both channels_last_3d, plus bias [C] (may be undefined).
bool depth_to_space(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& out);

// Attention scores in float32 from half-precision inputs: out = scale · q kᵀ, with q [R, D] and
// k [N, D] (bf16 or fp16, the same dtype, unit stride along D, any row stride) and out [R, N]
// float32 contiguous; one cuBLAS GEMM accumulating in float32 (ATen's half-precision matmul
// would round the scores to the inputs' dtype before the softmax).
bool attention_scores(const at::Tensor& q, const at::Tensor& k, double scale,
                      const at::Tensor& out);

}  // namespace wm::models::cuda
