// Raw CUDA launchers for the Wan2.1 VAE's memory-bound stages (src/models/kernels/cuda_kernels.cu).
// Plain pointers and sizes only — no LibTorch types — so the .cu file builds with nvcc alone.
// The torch-level wrappers with their checks are in src/models/kernels/torch/cuda_kernels.h.
//
// Layout: every tensor is "pixel-major" with channels innermost: element (frame t, row h, column w,
// channel c) at base + t·st + h·sh + w·sw + c, i.e. a channels_last_3d [1, C, T, H, W] tensor or
// a narrow() of one along T, H or W. Pointers and strides must keep 16-byte alignment and C must
// be a multiple of 16 / sizeof(element); the wrappers check this.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wm::models::cuda {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// Element strides of a pixel-major tensor's frames, rows and columns.
struct PixelStrides {
  int64_t t = 0, h = 0, w = 0;
};

// s = x + bias + residual (bias, residual optional); out = act(s / max(‖s‖₂ over C, eps) · gamma)
// with act = SiLU or identity. Either output may be null: sum_out gets s (it may alias x, in
// place), out the normalised values. gamma already holds √C. All four tensors are
// frames × height × width pixels, each with its own strides.
struct NormArgs {
  const void* x = nullptr;
  const void* bias = nullptr;      // [C] or null
  const void* residual = nullptr;  // pixel-major like x, or null
  const void* gamma = nullptr;     // [C]; may be null when out is null
  void* out = nullptr;
  void* sum_out = nullptr;
  PixelStrides x_strides, residual_strides, out_strides, sum_strides;
  int frames = 0, height = 0, width = 0;  // frames · height · width < 2³¹
  int channels = 0;
  float eps = 1e-12f;
  bool silu = false;
  // Threads per pixel, a power of two ≤ 32 (0: the largest power of two that divides the
  // channel count's 16-byte vectors, so no lane idles and each holds several vectors).
  int threads_per_pixel = 0;
};
cudaError_t launch_rms_norm(DType dtype, const NormArgs& args, cudaStream_t stream);

// Sub-pixel upsample epilogue. y: [T, H+1, W+1, 4C] (a 2×2 conv over the 1-padded source, one C
// block per output phase 2a+b); out: [T, 2H, 2W, C] with out[t, 2i+a, 2j+b, c] =
// y[t, i+a, j+b, (2a+b)·C + c] + bias[c].
struct DepthToSpaceArgs {
  const void* y = nullptr;
  const void* bias = nullptr;  // [C] or null
  void* out = nullptr;
  int64_t frames = 0;
  int height = 0;  // source H (output is 2H)
  int width = 0;   // source W
  int channels = 0;
};
cudaError_t launch_depth_to_space(DType dtype, const DepthToSpaceArgs& args, cudaStream_t stream);

}  // namespace wm::models::cuda
