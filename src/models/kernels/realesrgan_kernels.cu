// Memory-bound stages of the Real-ESRGAN networks as single CUDA passes (contracts in
// src/models/kernels/realesrgan_launch.h): the RRDB dense blocks' activation + concat scatter and
// their residual sums, SRVGG's pixel shuffle + nearest-upsample add, RRDBNet's nearest ×2.
// 16-byte accesses, float32 math.
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

int blocks_for(int64_t work) {
  const int64_t b = (work + 255) / 256;
  return int(b < 65536 * 8 ? (b > 0 ? b : 1) : 65536 * 8);
}

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
    Vec8<T> vbias, vslope;
    if (a.bias)
      vbias.raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.bias) + c));
    if (a.slopes)
      vslope.raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.slopes) + c));
    Vec8<T> r;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = to_f(va.v[k]);
      if (a.bias) v += to_f(vbias.v[k]);
      if (a.b) v = fmaf(a.beta, to_f(vb.v[k]), v);
      if (a.c) v = fmaf(a.gamma, v, to_f(vc.v[k]));
      if (a.slope >= 0.f && v < 0.f) v *= a.slope;
      if (a.slopes && v < 0.f) v *= to_f(vslope.v[k]);
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

// Element i of frames of `plane` = height · width elements: its frame, row and column.
struct Position {
  int64_t n;
  int y, x;
};
__device__ __forceinline__ Position position(int64_t i, int64_t plane, int width) {
  const int64_t n = i / plane;
  const int64_t yx = i - n * plane;
  const int y = int(yx / width);
  return {n, y, int(yx - int64_t(y) * width)};
}

// One thread per output pixel (n, Y, X), its three channels: scales other than 1, 2 and 4.
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
    const Position at = position(i, plane, out_w);
    const int64_t n = at.n, yx = i - n * plane;
    const int oy = at.y, ox = at.x;
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

// S outputs of one type, stored at once (S·sizeof(O) is 2 to 16 bytes, a power of two).
template <typename O, int S>
struct alignas(S * sizeof(O)) OutRow {
  O v[S];
};

// One thread per input pixel (n, y, x) for scale S: its 3·S² values of t read as one contiguous
// run (16-byte loads where the run allows), written as 3·S rows of S outputs. Neighbouring
// threads read and write neighbouring memory.
template <typename T, typename O, int S>
__global__ void __launch_bounds__(256) shuffle_add_pixel_kernel(EsrganShuffleAddArgs a) {
  constexpr int kCh = 3 * S * S;
  const int out_w = a.width * S, out_h = a.height * S;
  const int64_t pixels = int64_t(a.height) * a.width;
  const int64_t total = int64_t(a.frames) * pixels;
  O* out = static_cast<O*>(a.out);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Position at = position(i, pixels, a.width);
    const int64_t n = at.n;
    const int y = at.y, xx = at.x;
    float v[kCh];
    const T* tp = static_cast<const T*>(a.t) + i * kCh;
    if constexpr ((kCh * sizeof(T)) % 16 == 0) {
#pragma unroll
      for (int k = 0; k < kCh / 8; ++k) {
        Vec8<T> r;
        r.raw = __ldg(reinterpret_cast<const uint4*>(tp) + k);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[k * 8 + j] = to_f(r.v[j]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kCh; ++k) v[k] = to_f(tp[k]);
    }
    const T* xp =
        static_cast<const T*>(a.x) + n * a.x_strides[0] + y * a.x_strides[2] + xx * a.x_strides[3];
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float add = to_f(xp[c * a.x_strides[1]]);
#pragma unroll
      for (int py = 0; py < S; ++py) {
        OutRow<O, S> row;
#pragma unroll
        for (int px = 0; px < S; ++px) row.v[px] = from_f<O>(v[c * S * S + py * S + px] + add);
        *reinterpret_cast<OutRow<O, S>*>(out + ((n * 3 + c) * out_h + int64_t(y) * S + py) * out_w +
                                         int64_t(xx) * S) = row;
      }
    }
  }
}

// One thread per (input pixel, 8 channels): one 16-byte load, four 16-byte stores.
template <typename T>
__global__ void __launch_bounds__(256) nearest2_kernel(EsrganNearest2Args a) {
  const int vecs = a.channels / 8;
  const int64_t total = int64_t(a.frames) * a.height * a.width * vecs;
  const int64_t row = int64_t(2) * a.width * a.channels;  // one output row, in elements
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / vecs;
    const int c = int(i - p * vecs) * 8;
    const int64_t ny = p / a.width;  // n·H + y
    const int xx = int(p - ny * a.width);
    const uint4 v =
        __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.in) + p * a.channels + c));
    T* o = static_cast<T*>(a.out) + 2 * ny * row + int64_t(2 * xx) * a.channels + c;
    *reinterpret_cast<uint4*>(o) = v;
    *reinterpret_cast<uint4*>(o + a.channels) = v;
    *reinterpret_cast<uint4*>(o + row) = v;
    *reinterpret_cast<uint4*>(o + row + a.channels) = v;
  }
}

template <typename T, typename O>
void launch_shuffle_add(const EsrganShuffleAddArgs& args, cudaStream_t stream) {
  const int64_t pixels = int64_t(args.frames) * args.height * args.width;
  switch (args.scale) {
    case 4:
      shuffle_add_pixel_kernel<T, O, 4><<<blocks_for(pixels), 256, 0, stream>>>(args);
      return;
    case 2:
      shuffle_add_pixel_kernel<T, O, 2><<<blocks_for(pixels), 256, 0, stream>>>(args);
      return;
    case 1:
      shuffle_add_pixel_kernel<T, O, 1><<<blocks_for(pixels), 256, 0, stream>>>(args);
      return;
    default:
      shuffle_add_kernel<T, O>
          <<<blocks_for(pixels * args.scale * args.scale), 256, 0, stream>>>(args);
  }
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
  if (dtype == EsrganDType::kFloat16) {
    if (args.out_float)
      launch_shuffle_add<__half, float>(args, stream);
    else
      launch_shuffle_add<__half, __half>(args, stream);
  } else {
    if (args.out_float)
      launch_shuffle_add<__nv_bfloat16, float>(args, stream);
    else
      launch_shuffle_add<__nv_bfloat16, __nv_bfloat16>(args, stream);
  }
  return cudaGetLastError();
}

cudaError_t launch_esrgan_nearest2(EsrganDType dtype, const EsrganNearest2Args& args,
                                   cudaStream_t stream) {
  const int64_t work = int64_t(args.frames) * args.height * args.width * (args.channels / 8);
  if (work == 0) return cudaSuccess;
  if (args.channels % 8) return cudaErrorInvalidValue;
  if (dtype == EsrganDType::kFloat16) {
    nearest2_kernel<__half><<<blocks_for(work), 256, 0, stream>>>(args);
  } else {
    nearest2_kernel<__nv_bfloat16><<<blocks_for(work), 256, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace wm::models::cuda
