// The DiT's fused element-wise passes on CUDA (src/models/kernels/seedvr2_dit_kernels.cu), for bf16
// and fp16 networks. Each returns false (or an undefined tensor) when it cannot take its tensors —
// another device or dtype, a shape the kernel does not cover, a build without the kernels — and
// the caller then runs its ATen ops. Launched on the current stream.
//
// Internal to src/models/ (seedvr2_dit.cpp, tests).
#pragma once

#include <ATen/ATen.h>

namespace wm::models::seedvr2::cuda {

// True when this build has the kernels.
bool dit_kernels_available();

// RMSNorm of x (float32 [rows, dim]) · scale + shift (float32 [dim]; undefined: 1 and 0), as
// `dtype` (bf16 or fp16).
at::Tensor rms_modulate(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                        at::ScalarType dtype, double eps);

// v (float32 [rows, dim]) += y (half [rows, dim]) · gate (float32 [dim]; undefined: 1).
bool gated_add(const at::Tensor& v, const at::Tensor& y, const at::Tensor& gate);

// silu(in[:, :h]) · in[:, h:] for in half [rows, 2h].
at::Tensor swiglu(const at::Tensor& in);

// The window attention inputs packed (seedvr2_dit_launch.h, QkvPackArgs): rows src[i] of qkv
// (half [rows, 3·heads·head_dim]) normalised (q, k), rotated when `rotate`, into rows dest[i] of
// q_out, k_out, v_out (half [·, heads, head_dim]). src, dest int32 [items], pos float32
// [items, 3], weights float32 [head_dim], freq float32 [freqs] — all on the device.
bool qkv_pack(const at::Tensor& qkv, const at::Tensor& src, const at::Tensor& dest,
              const at::Tensor& pos, const at::Tensor& q_weight, const at::Tensor& k_weight,
              const at::Tensor& freq, bool rotate, int heads, double eps, const at::Tensor& q_out,
              const at::Tensor& k_out, const at::Tensor& v_out);

}  // namespace wm::models::seedvr2::cuda
