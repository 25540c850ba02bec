// Raw CUDA launchers for SeedVR2's DiT (src/models/kernels/seedvr2_dit_kernels.cu): the
// element-wise passes around its matrix products, fused. Plain pointers and sizes only — no
// LibTorch types — so the .cu file builds with nvcc alone. The torch-level wrappers with their
// checks are src/models/kernels/torch/seedvr2_dit_kernels.h.
//
// Half types only (bf16, fp16); arithmetic in float32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wm::models::seedvr2::cuda {

enum class HalfType { kFloat16, kBFloat16 };

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · scale + shift (scale, shift: [dim] float32;
// null: 1 and 0). x float32 [rows, dim], out half [rows, dim], both contiguous.
struct RmsModulateArgs {
  const float* x = nullptr;
  void* out = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
  int64_t rows = 0;
  int dim = 0;
  float eps = 1e-5f;
};
cudaError_t launch_rms_modulate(HalfType type, const RmsModulateArgs& a, cudaStream_t stream);

// v[r, :] += y[r, :] · gate (v float32 [rows, dim], y half [rows, dim], gate float32 [dim] or
// null: 1), contiguous.
struct GatedAddArgs {
  float* v = nullptr;
  const void* y = nullptr;
  const float* gate = nullptr;
  int64_t rows = 0;
  int dim = 0;
};
cudaError_t launch_gated_add(HalfType type, const GatedAddArgs& a, cudaStream_t stream);

// out[r, j] = silu(in[r, j]) · in[r, hidden + j] (in half [rows, 2·hidden], out half
// [rows, hidden]), contiguous.
struct SwigluArgs {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t rows = 0;
  int hidden = 0;
};
cudaError_t launch_swiglu(HalfType type, const SwigluArgs& a, cudaStream_t stream);

// The attention inputs of window attention, packed: for each item i, the q, k and v of source
// row src[i] of `qkv` ([rows, 3, heads, head_dim] half, contiguous) go to row dest[i] of q_out,
// k_out, v_out ([·, heads, head_dim] half): q and k normalised over head_dim (RMS, eps) times
// q_weight / k_weight (float32 [head_dim]) and, when `rotate`, rotated: pair m = (2m, 2m + 1),
// m < 3·freqs, by the angle pos[i, m / freqs] · freq[m % freqs] (pos float32 [items, 3], freq
// float32 [freqs]); the rest pass through. head_dim a multiple of 4, at most 128.
struct QkvPackArgs {
  const void* qkv = nullptr;
  void* q_out = nullptr;
  void* k_out = nullptr;
  void* v_out = nullptr;
  const int32_t* src = nullptr;
  const int32_t* dest = nullptr;
  const float* pos = nullptr;
  const float* q_weight = nullptr;
  const float* k_weight = nullptr;
  const float* freq = nullptr;
  int64_t items = 0;
  int heads = 0, head_dim = 0, freqs = 0;
  bool rotate = true;
  float eps = 1e-5f;
};
cudaError_t launch_qkv_pack(HalfType type, const QkvPackArgs& a, cudaStream_t stream);

}  // namespace wm::models::seedvr2::cuda
