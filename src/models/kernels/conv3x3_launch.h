// Raw CUDA launcher of our own 3×3 convolution (src/models/kernels/conv3x3_kernels.cu): stride 1,
// padding 1, pixel-major (channels_last) fp16/bf16 activations, fp32 accumulation on tensor
// cores, with the Real-ESRGAN epilogues fused (bias, PReLU / leaky ReLU, the RRDB residual sums,
// several destinations at channel offsets). Plain pointers and sizes only, no LibTorch types, so
// the .cu file builds with nvcc alone (tools/bench/conv3x3_bench.cu checks and times it); the
// tensor checks live in realesrgan.cpp's wrapper.
//
// Layout: element (pixel p, channel c) of a pixel-major tensor at base + p·stride + c, pixels in
// [N, H, W] order. Every stride a multiple of 8 elements and every pointer 16-byte aligned (a
// channel offset into a wider buffer is folded into its pointer, so offsets are multiples of 8).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "src/models/kernels/realesrgan_launch.h"

namespace wm::models::cuda {

// y = conv3x3(input[:, :Cin]) + bias; then the activation; with residual1: y = r1 + alpha1·y;
// with residual2: y = r2 + alpha2·y. Written (channels [0, Cout)) to every one of `out`. float32
// arithmetic, one rounding at the store. The destinations must not overlap the input (the
// kernel reads neighbouring pixels that other blocks may already have written); a residual may
// be a destination (each element is read by the thread that writes it, before it writes it).
struct Conv3x3Args {
  static constexpr int kMaxOutputs = 6;
  enum Activation { kNone = 0, kPRelu = 1, kLeaky = 2 };
  const void* input = nullptr;
  int64_t input_stride = 0;  // elements per pixel, >= in_channels
  int in_channels = 0;
  const void* weight = nullptr;  // [Cout][3][3][Cin] contiguous (a channels_last weight)
  const void* bias = nullptr;    // [Cout] or null
  int out_channels = 0;
  int activation = kNone;
  const void* prelu = nullptr;  // [Cout] slopes (kPRelu)
  float leaky_slope = 0.2f;     // (kLeaky)
  const void* residual1 = nullptr;
  int64_t residual1_stride = 0;
  float alpha1 = 1.f;
  const void* residual2 = nullptr;
  int64_t residual2_stride = 0;
  float alpha2 = 1.f;
  void* out[kMaxOutputs] = {};
  int64_t out_stride[kMaxOutputs] = {};
  int outputs = 0;
  int frames = 0, height = 0, width = 0;
  // Benchmark only (tools/bench/conv3x3_bench.cu), 0 = the default: bit 0 (1) forces 32 output
  // channels per block, bit 1 (2) direct stores instead of the staged epilogue for 64-channel
  // blocks, bit 3 (8) computes without storing anything (the epilogue's cost).
  int variant = 0;
};

// Whether launch_conv3x3 takes these channel counts: Cin a multiple of 32 up to 192, Cout 32 or
// 64 (layout and alignment are checked at launch).
bool conv3x3_supported(int in_channels, int out_channels);

// cudaErrorInvalidValue (nothing launched) for arguments it does not take.
cudaError_t launch_conv3x3(EsrganDType dtype, const Conv3x3Args& args, cudaStream_t stream);

}  // namespace wm::models::cuda
