// SeedVR2 VAE GroupNorm(+SiLU) per frame on channels-last activations (contract in
// src/models/kernels/seedvr2_launch.h): three passes over x (sum; sum of squared deviations;
// normalise, affine, SiLU and write), 16-byte accesses, float32 arithmetic, per-group sums in
// double.
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

// Pass 0: sums of x per (frame, group) into sums[0]; pass 1: sums of (x − mean)² into sums[1].
// Grid (blocks per frame, frames). A thread's vectors are kThreads·N·gridDim.x elements apart,
// a multiple of C, so each thread always sees the same channels.
template <typename T>
__global__ void gn_reduce(GroupNormArgs a, int pass) {
  constexpr int N = Vec<T>::kN;
  __shared__ float per_channel[1024];
  const int C = a.channels, G = a.groups, cpg = C / G;
  const int t = blockIdx.y;
  for (int c = threadIdx.x; c < C; c += blockDim.x) per_channel[c] = 0.f;
  __syncthreads();
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
  for (int i = 0; i < N; ++i) atomicAdd(&per_channel[c0 + i], acc[i]);
  __syncthreads();
  for (int g = threadIdx.x; g < G; g += blockDim.x) {
    double s = 0;
    for (int c = g * cpg; c < (g + 1) * cpg; ++c) s += per_channel[c];
    atomicAdd(&a.sums[int64_t(pass) * a.frames * G + int64_t(t) * G + g], s);
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
  const int64_t vectors = a.pixels * a.channels / N;
  int64_t per_frame = (vectors + kThreads - 1) / kThreads;
  const int64_t most = std::max<int64_t>(8, 4096 / a.frames);
  if (per_frame > most) per_frame = most;
  const dim3 grid(unsigned(per_frame), unsigned(a.frames));
  cudaError_t err =
      cudaMemsetAsync(a.sums, 0, sizeof(double) * 2 * size_t(a.frames) * size_t(a.groups), stream);
  if (err != cudaSuccess) return err;
  gn_reduce<T><<<grid, kThreads, 0, stream>>>(a, 0);
  gn_reduce<T><<<grid, kThreads, 0, stream>>>(a, 1);
  gn_affine<<<a.frames, 256, 0, stream>>>(a);
  gn_apply<T><<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

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
