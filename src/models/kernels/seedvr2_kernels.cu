// SeedVR2 VAE GroupNorm(+SiLU) per frame on channels-last activations (contract in
// src/models/kernels/seedvr2_launch.h): three passes over x (sum; sum of squared deviations;
// normalise, affine, SiLU and write), 16-byte accesses, float32 arithmetic, per-group sums in
// double, every sum in a fixed order (the same bits on every run).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "src/models/kernels/cuda_convert.cuh"
#include "src/models/kernels/seedvr2_launch.h"

namespace wm::models::seedvr2::cuda {
namespace {

using models::cuda::from_f;
using models::cuda::to_f;

constexpr int kThreads = 256;

template <typename T>
struct Vec {
  static constexpr int kN = 16 / int(sizeof(T));
  union {
    uint4 raw;
    T v[kN];
  };
};

// Pass 0: sums of x per (frame, group); pass 1: sums of (x − mean)² (mean from sums[0]). Grid
// (blocks per frame, frames). A thread's vectors are kThreads·N·gridDim.x elements apart, a
// multiple of C, so each thread always sees the same channels: thread k's are (k·N) mod C on.
// Every sum runs in a fixed order (no atomics), and the blocks per frame depend on the frame
// size only, so a frame's statistics are the same bits whatever else a call holds (a run split
// into time chunks or over ranks normalises exactly as the whole): each block's per-group sums
// go to partials[pass, frame, block, group], which gn_total adds in block order.
template <typename T>
__global__ void gn_reduce(GroupNormArgs a, int pass) {
  constexpr int N = Vec<T>::kN;
  __shared__ float lanes[kThreads * N];
  __shared__ float per_channel[1024];
  const int C = a.channels, G = a.groups, cpg = C / G;
  const int t = blockIdx.y;
  const T* x = static_cast<const T*>(a.x) + int64_t(t) * a.x_frame_stride;
  const int64_t vectors = a.pixels * C / N;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int c0 = int((v * N) % C);
  float mean[N];
  if (pass == 1) {
    const double n = double(a.pixels) * cpg;
#pragma unroll
    for (int i = 0; i < N; ++i) mean[i] = float(a.sums[t * G + (c0 + i) / cpg] / n);
  }
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.f;
  for (; v < vectors; v += step) {
    Vec<T> in;
    in.raw = __ldg(reinterpret_cast<const uint4*>(x) + v);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = to_f<T>(in.v[i]);
      if (pass == 0) {
        acc[i] += f;
      } else {
        const float d = f - mean[i];
        acc[i] += d * d;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) lanes[threadIdx.x * N + i] = acc[i];
  __syncthreads();
  // Channel c = j·N + i is lane i of threads j, j + C/N, j + 2C/N, … (in that order).
  const int row = C / N, rows = kThreads * N / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int j = c / N, i = c % N;
    float s = 0.f;
    for (int r = 0; r < rows; ++r) s += lanes[(r * row + j) * N + i];
    per_channel[c] = s;
  }
  __syncthreads();
  double* out = a.partials + ((int64_t(pass) * a.frames + t) * gridDim.x + blockIdx.x) * G;
  for (int g = threadIdx.x; g < G; g += blockDim.x) {
    double s = 0;
    for (int c = g * cpg; c < (g + 1) * cpg; ++c) s += per_channel[c];
    out[g] = s;
  }
}

// sums[pass, frame, group] = the blocks' partial sums in block order. Grid frames.
__global__ void gn_total(GroupNormArgs a, int pass, int blocks) {
  const int t = blockIdx.x, G = a.groups;
  const double* in = a.partials + (int64_t(pass) * a.frames + t) * blocks * G;
  for (int g = threadIdx.x; g < G; g += blockDim.x) {
    double s = 0;
    for (int b = 0; b < blocks; ++b) s += in[int64_t(b) * G + g];
    a.sums[(int64_t(pass) * a.frames + t) * G + g] = s;
  }
}

// Per (frame, channel): scale = w·rstd, shift = b − mean·scale. Grid frames, block ≥ C threads.
__global__ void gn_affine(GroupNormArgs a) {
  const int t = blockIdx.x, C = a.channels, G = a.groups, cpg = C / G;
  const double n = double(a.pixels) * cpg;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int g = c / cpg;
    const double mean = a.sums[int64_t(t) * G + g] / n;
    const double var = a.sums[int64_t(a.frames) * G + int64_t(t) * G + g] / n;
    const float rstd = float(1.0 / sqrt(var + double(a.eps)));
    const float scale = a.weight[c] * rstd;
    a.affine[int64_t(t) * C + c] = scale;
    a.affine[int64_t(a.frames) * C + int64_t(t) * C + c] = a.bias[c] - float(mean) * scale;
  }
}

template <typename T>
__global__ void gn_apply(GroupNormArgs a) {
  constexpr int N = Vec<T>::kN;
  const int C = a.channels;
  const int t = blockIdx.y;
  const T* x = static_cast<const T*>(a.x) + int64_t(t) * a.x_frame_stride;
  T* out = static_cast<T*>(a.out) + int64_t(t) * a.out_frame_stride;
  const float* scale = a.affine + int64_t(t) * C;
  const float* shift = a.affine + int64_t(a.frames) * C + int64_t(t) * C;
  const int64_t vectors = a.pixels * C / N;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int c0 = int((v * N) % C);
  float sc[N], sh[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    sc[i] = scale[c0 + i];
    sh[i] = shift[c0 + i];
  }
  for (; v < vectors; v += step) {
    Vec<T> in, o;
    in.raw = __ldg(reinterpret_cast<const uint4*>(x) + v);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float y = to_f<T>(in.v[i]) * sc[i] + sh[i];
      if (a.silu) y = y / (1.f + __expf(-y));
      o.v[i] = from_f<T>(y);
    }
    reinterpret_cast<uint4*>(out)[v] = o.raw;
  }
}

template <typename T>
cudaError_t group_norm_typed(const GroupNormArgs& a, cudaStream_t stream) {
  constexpr int N = Vec<T>::kN;
  if (a.channels <= 0 || a.channels > 1024 || a.channels % N != 0 ||
      (kThreads * N) % a.channels != 0 || a.groups <= 0 || a.channels % a.groups != 0 ||
      a.frames <= 0 || a.frames > 65535 || a.pixels <= 0) {
    return cudaErrorInvalidValue;
  }
  const int blocks = group_norm_blocks(a.pixels, a.channels, int(sizeof(T)));
  const dim3 grid(unsigned(blocks), unsigned(a.frames));
  gn_reduce<T><<<grid, kThreads, 0, stream>>>(a, 0);
  gn_total<<<a.frames, 64, 0, stream>>>(a, 0, blocks);
  gn_reduce<T><<<grid, kThreads, 0, stream>>>(a, 1);
  gn_total<<<a.frames, 64, 0, stream>>>(a, 1, blocks);
  gn_affine<<<a.frames, 256, 0, stream>>>(a);
  gn_apply<T><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

int group_norm_blocks(int64_t pixels, int channels, int element_size) {
  const int64_t vectors = pixels * channels / (16 / element_size);
  return int(std::clamp<int64_t>((vectors + kThreads - 1) / kThreads, 1, kGroupNormBlocks));
}

cudaError_t launch_group_norm(DType dtype, const GroupNormArgs& args, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return group_norm_typed<float>(args, stream);
    case DType::kFloat16:
      return group_norm_typed<__half>(args, stream);
    case DType::kBFloat16:
      return group_norm_typed<__nv_bfloat16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace wm::models::seedvr2::cuda
