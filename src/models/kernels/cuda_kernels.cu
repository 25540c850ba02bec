// Memory-bound Wan2.1 VAE stages as single CUDA passes (contracts in
// src/models/kernels/cuda_launch.h). Each element is read once and written once with 16-byte
// accesses; arithmetic is in float32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "src/models/kernels/cuda_launch.h"

namespace wm::models::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
struct Pack {
  static constexpr int kVec = 16 / int(sizeof(T));
  union {
    uint4 raw;
    T v[kVec];
  };
  __device__ __forceinline__ Pack() {}
};

template <typename T>
__device__ __forceinline__ Pack<T> load(const T* p) {
  Pack<T> r;
  r.raw = __ldg(reinterpret_cast<const uint4*>(p));
  return r;
}
template <typename T>
__device__ __forceinline__ void store(T* p, const Pack<T>& v) {
  *reinterpret_cast<uint4*>(p) = v.raw;
}

// SiLU y·σ(y). The norm pass was compute-bound (2.1 TB/s on an H200 with IEEE division, against
// 3.8 for the residual sum that moves more bytes), and its special-function unit work bounds it.
// Float32: the fast reciprocal division (1 + e^−y ≥ 1, so within 2 ulp; −0 for y → −∞).
// Half types: σ(y) = ½ + ½·tanh(y/2) with the hardware tanh (one special-function op instead
// of two; relative error ~2⁻¹¹, below bf16's and fp16's rounding of the result).
template <typename T>
__device__ __forceinline__ float silu(float y) {
  if constexpr (sizeof(T) == 4) {
    return __fdividef(y, 1.f + __expf(-y));
  } else {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * y));
    const float h = 0.5f * y;
    return fmaf(h, t, h);
  }
}

__device__ __forceinline__ int64_t offset_of(const PixelStrides& s, int t, int h, int w) {
  return int64_t(t) * s.t + int64_t(h) * s.h + int64_t(w) * s.w;
}

// A group of `1 << tpp_log2` consecutive threads (within one warp) handles one pixel; each thread
// holds up to kMaxVec 16-byte vectors of its channels in registers, so x is read exactly once.
template <typename T, int kMaxVec>
__global__ void __launch_bounds__(256) rms_norm_kernel(NormArgs a, int tpp_log2) {
  constexpr int kVec = Pack<T>::kVec;
  const T* x = static_cast<const T*>(a.x);
  const T* bias = static_cast<const T*>(a.bias);
  const T* res = static_cast<const T*>(a.residual);
  const T* gamma = static_cast<const T*>(a.gamma);
  T* out = static_cast<T*>(a.out);
  T* sum_out = static_cast<T*>(a.sum_out);
  const int tpp = 1 << tpp_log2;
  const int nvec = a.channels / kVec;
  const uint32_t width = uint32_t(a.width), height = uint32_t(a.height);
  const uint32_t pixels = uint32_t(a.frames) * height * width;
  const int64_t threads_total = int64_t(gridDim.x) * blockDim.x;
  // Grid-stride over pixel groups; every thread of a warp runs the same trip count (the shuffles
  // need all lanes), inactive ones just skip their memory accesses.
  const int64_t groups = (int64_t(pixels) * tpp + threads_total - 1) / threads_total;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t gid = g * threads_total + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t p64 = gid >> tpp_log2;
    const int lane = int(gid & (tpp - 1));
    const bool active = p64 < int64_t(pixels);
    const uint32_t p = active ? uint32_t(p64) : 0u, row = p / width;
    const int w = int(p - row * width), t = int(row / height), h = int(row - uint32_t(t) * height);
    const int64_t ox = offset_of(a.x_strides, t, h, w);
    const int64_t orr = res ? offset_of(a.residual_strides, t, h, w) : 0;
    float v[kMaxVec][kVec];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
      const int cv = lane + i * tpp;
      if (active && cv < nvec) {
        const Pack<T> px = load(x + ox + int64_t(cv) * kVec);
        Pack<T> pb, pr;
        if (bias) pb = load(bias + cv * kVec);
        if (res) pr = load(res + orr + int64_t(cv) * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          float s = to_float(px.v[k]);
          if (bias) s += to_float(pb.v[k]);
          if (res) s += to_float(pr.v[k]);
          // Normalise the value as stored (rounded to T), like an unfused add then norm.
          if (bias || res) s = to_float(from_float<T>(s));
          v[i][k] = s;
          ss += s * s;
        }
      }
    }
    // (out is the same for the whole grid, so the shuffles stay warp-uniform.)
    if (out) {
      for (int o = tpp >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    const float inv = 1.f / fmaxf(sqrtf(ss), a.eps);
    const int64_t os = sum_out ? offset_of(a.sum_strides, t, h, w) : 0;
    const int64_t oo = out ? offset_of(a.out_strides, t, h, w) : 0;
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i) {
      const int cv = lane + i * tpp;
      if (!(active && cv < nvec)) continue;
      if (sum_out) {
        Pack<T> ps;
#pragma unroll
        for (int k = 0; k < kVec; ++k) ps.v[k] = from_float<T>(v[i][k]);
        store(sum_out + os + int64_t(cv) * kVec, ps);
      }
      if (out) {
        const Pack<T> pg = load(gamma + cv * kVec);
        Pack<T> po;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          float y = v[i][k] * inv * to_float(pg.v[k]);
          if (a.silu) y = silu<T>(y);
          po.v[k] = from_float<T>(y);
        }
        store(out + oo + int64_t(cv) * kVec, po);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256) depth_to_space_kernel(DepthToSpaceArgs a) {
  constexpr int kVec = Pack<T>::kVec;
  const T* y = static_cast<const T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  T* out = static_cast<T*>(a.out);
  const int nvec = a.channels / kVec;
  const int ow = 2 * a.width, oh = 2 * a.height;
  const int64_t total = a.frames * oh * ow * nvec;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const int cv = int(idx % nvec);
    const int64_t pix = idx / nvec;
    const int x = int(pix % ow);
    const int64_t rest = pix / ow;
    const int yy = int(rest % oh);
    const int64_t t = rest / oh;
    const int pa = yy & 1, pb = x & 1;
    const int i = (yy >> 1) + pa, j = (x >> 1) + pb;
    const int64_t src = ((t * (a.height + 1) + i) * (a.width + 1) + j) * (4 * int64_t(a.channels)) +
                        (2 * pa + pb) * a.channels + cv * kVec;
    Pack<T> v = load(y + src);
    if (bias) {
      const Pack<T> b = load(bias + cv * kVec);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + to_float(b.v[k]));
    }
    store(out + pix * a.channels + cv * kVec, v);
  }
}

int blocks_for(int64_t threads) {
  const int64_t blocks = (threads + 255) / 256;
  // Plenty for 132 SMs; the kernels grid-stride beyond that.
  return int(blocks < (int64_t(1) << 20) ? blocks : (int64_t(1) << 20));
}

template <typename T>
cudaError_t rms_norm_typed(const NormArgs& a, cudaStream_t stream) {
  constexpr int kVec = Pack<T>::kVec;
  const int nvec = a.channels / kVec;
  int tpp_log2 = 0;
  if (a.threads_per_pixel > 0) {
    while ((2 << tpp_log2) <= a.threads_per_pixel && tpp_log2 < 5) ++tpp_log2;
  } else {
    // 96 bf16 channels: 4 threads of 3 vectors (a group of 16 would leave 4 lanes idle and keep
    // one 16-byte load per thread in flight).
    while (nvec % (2 << tpp_log2) == 0 && tpp_log2 < 5) ++tpp_log2;
  }
  // At most 8 vectors per thread in registers (up to 256 vectors per pixel).
  while ((nvec + (1 << tpp_log2) - 1) >> tpp_log2 > 8 && tpp_log2 < 5) ++tpp_log2;
  const int tpp = 1 << tpp_log2;
  const int per_thread = (nvec + tpp - 1) / tpp;
  const int64_t pixels = int64_t(a.frames) * a.height * a.width;
  if (pixels == 0) return cudaSuccess;
  const int blocks = blocks_for(pixels * tpp);
  switch (per_thread) {
    case 1:
      rms_norm_kernel<T, 1><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    case 2:
      rms_norm_kernel<T, 2><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    case 3:
      rms_norm_kernel<T, 3><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    case 4:
      rms_norm_kernel<T, 4><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    case 5:
    case 6:
      rms_norm_kernel<T, 6><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    case 7:
    case 8:
      rms_norm_kernel<T, 8><<<blocks, 256, 0, stream>>>(a, tpp_log2);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t depth_to_space_typed(const DepthToSpaceArgs& a, cudaStream_t stream) {
  constexpr int kVec = Pack<T>::kVec;
  const int64_t total = a.frames * 4 * int64_t(a.height) * a.width * (a.channels / kVec);
  if (total == 0) return cudaSuccess;
  depth_to_space_kernel<T><<<blocks_for(total), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm(DType dtype, const NormArgs& args, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return rms_norm_typed<float>(args, stream);
    case DType::kFloat16:
      return rms_norm_typed<__half>(args, stream);
    case DType::kBFloat16:
      return rms_norm_typed<__nv_bfloat16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_depth_to_space(DType dtype, const DepthToSpaceArgs& args, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat32:
      return depth_to_space_typed<float>(args, stream);
    case DType::kFloat16:
      return depth_to_space_typed<__half>(args, stream);
    case DType::kBFloat16:
      return depth_to_space_typed<__nv_bfloat16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace wm::models::cuda
