// Raw CUDA launcher for the SeedVR2 VAE's GroupNorm(+SiLU) (src/models/kernels/seedvr2_kernels.cu).
// Plain pointers and sizes only — no LibTorch types — so the .cu file builds with nvcc alone.
// The torch-level wrapper with its checks is src/models/kernels/torch/seedvr2_kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wm::models::seedvr2::cuda {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// GroupNorm per frame (statistics over the C/G channels × pixels of one frame and group, biased
// variance, float32 arithmetic, double accumulation), then per-channel affine and optional SiLU.
// x and out: frames of `pixels` pixels × `channels` values, channels innermost, frame t at
// base + t·frame_stride (elements). weight, bias: float32 [C]. scratch: sums 2·frames·groups
// doubles, partials 2·frames·group_norm_blocks()·groups doubles, affine 2·frames·channels floats.
// Deterministic: the same bits on every run, and a frame's the same whatever frames a call holds. C
// must be a multiple of the 16-byte vector (8 half, 4 float), 256 · vector a multiple of C,
// pointers and frame strides 16-byte aligned (the wrapper checks).
struct GroupNormArgs {
  const void* x = nullptr;
  void* out = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;
  double* sums = nullptr;      // [2, frames, groups]
  double* partials = nullptr;  // [2, frames, group_norm_blocks(), groups]
  float* affine = nullptr;     // [2, frames, channels]: scale, shift
  int64_t x_frame_stride = 0, out_frame_stride = 0;
  int64_t pixels = 0;
  int frames = 0, channels = 0, groups = 0;
  float eps = 1e-6f;
  bool silu = false;
};
// Thread blocks per frame: from the frame's size only (at most kGroupNormBlocks).
constexpr int kGroupNormBlocks = 512;
int group_norm_blocks(int64_t pixels, int channels, int element_size);
cudaError_t launch_group_norm(DType dtype, const GroupNormArgs& args, cudaStream_t stream);

}  // namespace wm::models::seedvr2::cuda
