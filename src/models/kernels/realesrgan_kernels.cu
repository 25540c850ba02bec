// Memory-bound stages of the Real-ESRGAN networks as single CUDA passes (contracts in
// src/models/kernels/realesrgan_launch.h): the RRDB dense blocks' activation + concat scatter and
// their residual sums, SRVGG's pixel shuffle + nearest-upsample add. 16-byte accesses, float32
// math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "src/models/kernels/cuda_convert.cuh"
#include "src/models/kernels/realesrgan_launch.h"

namespace wm::models::cuda {
namespace {

template <typename T>
union Vec8 {
  uint4 raw;
  T v[8];
};

// One thread per (pixel, 8 channels).
template <typename T>
__global__ void __launch_bounds__(256) mix_kernel(EsrganMixArgs a) {
  const int vecs = a.channels / 8;
  const int64_t total = a.pixels * vecs;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / vecs;
    const int c = int(i - p * vecs) * 8;
    Vec8<T> va, vb, vc;
    va.raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.a) + p * a.a_stride + c));
    if (a.b)
      vb.raw =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.b) + p * a.b_stride + c));
    if (a.c)
      vc.raw =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.c) + p * a.c_stride + c));
    Vec8<T> r;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = to_f(va.v[k]);
      if (a.b) v = fmaf(a.beta, to_f(vb.v[k]), v);
      if (a.c) v = fmaf(a.gamma, v, to_f(vc.v[k]));
      if (a.slope >= 0.f && v < 0.f) v *= a.slope;
      r.v[k] = from_f<T>(v);
    }
#pragma unroll
    for (int o = 0; o < EsrganMixArgs::kMaxOutputs; ++o) {
      if (o < a.outputs) {
        *reinterpret_cast<uint4*>(static_cast<T*>(a.out[o]) + p * a.out_stride[o] + c) = r.raw;
      }
    }
  }
}

// One thread per output pixel (n, Y, X), its three channels.
template <typename T, typename O>
__global__ void __launch_bounds__(256) shuffle_add_kernel(EsrganShuffleAddArgs a) {
  const int s = a.scale, ch = 3 * s * s;
  const int out_w = a.width * s, out_h = a.height * s;
  const int64_t plane = int64_t(out_h) * out_w;
  const int64_t total = int64_t(a.frames) * plane;
  const T* t = static_cast<const T*>(a.t);
  const T* x = static_cast<const T*>(a.x);
  O* out = static_cast<O*>(a.out);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / plane;
    const int64_t yx = i - n * plane;
    const int oy = int(yx / out_w), ox = int(yx - int64_t(oy) * out_w);
    const int y = oy / s, xx = ox / s;
    const int phase = (oy - y * s) * s + (ox - xx * s);
    const T* tp = t + ((n * a.height + y) * a.width + xx) * ch + phase;
    const T* xp = x + n * a.x_strides[0] + y * a.x_strides[2] + xx * a.x_strides[3];
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float v = to_f(tp[c * s * s]) + to_f(xp[c * a.x_strides[1]]);
      out[(n * 3 + c) * plane + yx] = from_f<O>(v);
    }
  }
}

int blocks_for(int64_t work) {
  const int64_t b = (work + 255) / 256;
  return int(b < 65536 * 8 ? (b > 0 ? b : 1) : 65536 * 8);
}

}  // namespace

cudaError_t launch_esrgan_mix(EsrganDType dtype, const EsrganMixArgs& args, cudaStream_t stream) {
  const int64_t work = args.pixels * (args.channels / 8);
  if (work == 0) return cudaSuccess;
  if (dtype == EsrganDType::kFloat16) {
    mix_kernel<__half><<<blocks_for(work), 256, 0, stream>>>(args);
  } else {
    mix_kernel<__nv_bfloat16><<<blocks_for(work), 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

cudaError_t launch_esrgan_shuffle_add(EsrganDType dtype, const EsrganShuffleAddArgs& args,
                                      cudaStream_t stream) {
  const int64_t work = int64_t(args.frames) * args.height * args.width * args.scale * args.scale;
  if (work == 0) return cudaSuccess;
  const int blocks = blocks_for(work);
  if (dtype == EsrganDType::kFloat16) {
    if (args.out_float)
      shuffle_add_kernel<__half, float><<<blocks, 256, 0, stream>>>(args);
    else
      shuffle_add_kernel<__half, __half><<<blocks, 256, 0, stream>>>(args);
  } else {
    if (args.out_float)
      shuffle_add_kernel<__nv_bfloat16, float><<<blocks, 256, 0, stream>>>(args);
    else
      shuffle_add_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace wm::models::cuda
