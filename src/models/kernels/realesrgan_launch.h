// Raw CUDA launchers for the Real-ESRGAN networks' memory-bound stages
// (src/models/kernels/realesrgan_kernels.cu). Plain pointers and sizes only, no LibTorch types, so
// the .cu file builds with nvcc alone; the checks live in realesrgan.cpp's wrappers.
//
// Layout: "pixel-major" tensors (channels_last [N, C, H, W]): element (pixel p, channel c) at
// base + p·stride + c. Strides, channel counts and channel offsets must be multiples of 8
// elements (16 bytes) and every base pointer 16-byte aligned; the wrappers check this.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wm::models::cuda {

enum class EsrganDType { kFloat16, kBFloat16 };

// v = a (+ bias) (+ beta·b); with c: v = c + gamma·v; with slope >= 0: v = leaky_relu(v, slope);
// with slopes: v = prelu(v, slopes). The
// value is written to every one of `outputs` destinations (the dense-block concat buffers of an
// RRDB and the block's own input copy). Arithmetic in float32, one rounding at the store.
struct EsrganMixArgs {
  static constexpr int kMaxOutputs = 6;
  const void* a = nullptr;
  int64_t a_stride = 0;
  const void* b = nullptr;  // optional
  int64_t b_stride = 0;
  float beta = 1.f;
  const void* c = nullptr;  // optional
  int64_t c_stride = 0;
  float gamma = 1.f;
  float slope = -1.f;            // < 0: no activation
  const void* bias = nullptr;    // optional, per channel: added to a first
  const void* slopes = nullptr;  // optional, per channel: PReLU (instead of `slope`)
  void* out[kMaxOutputs] = {};
  int64_t out_stride[kMaxOutputs] = {};
  int outputs = 0;
  int64_t pixels = 0;
  int channels = 0;
};
cudaError_t launch_esrgan_mix(EsrganDType dtype, const EsrganMixArgs& args, cudaStream_t stream);

// SRVGG's tail: out[n, c, Y, X] = t[n, Y/s, X/s, c·s² + (Y%s)·s + X%s] + x[n, c, Y/s, X/s]
// (pixel shuffle plus the nearest-neighbour upsampled input) in one pass, float32 math, one
// rounding. t: pixel-major [N, H, W, 3·s²] (contiguous channels_last, 16-byte aligned); x: any
// strides (elements) for n, c, h, w; out: contiguous NCHW [N, 3, s·H, s·W], float32 or the run
// dtype, 16-byte aligned. Scales 1, 2 and 4 take one thread per input pixel (whole rows of s
// outputs per store); others one per output pixel.
struct EsrganShuffleAddArgs {
  const void* t = nullptr;
  const void* x = nullptr;
  int64_t x_strides[4] = {};
  void* out = nullptr;
  bool out_float = false;
  int frames = 0, height = 0, width = 0, scale = 4;
};
cudaError_t launch_esrgan_shuffle_add(EsrganDType dtype, const EsrganShuffleAddArgs& args,
                                      cudaStream_t stream);

// Nearest-neighbour ×2 of a pixel-major tensor: out[n, 2y + i, 2x + j, c] = in[n, y, x, c] for
// i, j in {0, 1}. in: [N, H, W, C] contiguous, out: [N, 2H, 2W, C] contiguous; C a multiple of 8,
// both 16-byte aligned. RRDBNet's two upsamplings (ATen's channels-last kernel ran at a seventh
// of the memory's speed).
struct EsrganNearest2Args {
  const void* in = nullptr;
  void* out = nullptr;
  int frames = 0, height = 0, width = 0, channels = 0;
};
cudaError_t launch_esrgan_nearest2(EsrganDType dtype, const EsrganNearest2Args& args,
                                   cudaStream_t stream);

}  // namespace wm::models::cuda
