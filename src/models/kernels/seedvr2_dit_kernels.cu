// SeedVR2 DiT element-wise kernels (contract: seedvr2_dit_launch.h). Plain CUDA, no Torch headers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "src/models/kernels/seedvr2_dit_launch.h"

namespace wm::models::seedvr2::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

constexpr int kRowThreads = 256;

// One block per row.
template <typename T>
__global__ void rms_modulate_kernel(RmsModulateArgs a) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* x = a.x + row * a.dim;
  T* out = static_cast<T*>(a.out) + row * a.dim;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < a.dim; j += blockDim.x) sum += x[j] * x[j];
  const float inv = rsqrtf(block_sum(sum, shared) / float(a.dim) + a.eps);
  for (int j = threadIdx.x; j < a.dim; j += blockDim.x) {
    float y = x[j] * inv;
    if (a.scale) y *= a.scale[j];
    if (a.shift) y += a.shift[j];
    out[j] = from_float<T>(y);
  }
}

template <typename T>
__global__ void gated_add_kernel(GatedAddArgs a) {
  const int64_t n = a.rows * a.dim;
  const T* y = static_cast<const T*>(a.y);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = a.gate ? a.gate[i % a.dim] : 1.0f;
    a.v[i] += to_float<T>(y[i]) * g;
  }
}

template <typename T>
__global__ void swiglu_kernel(SwigluArgs a) {
  const int64_t n = a.rows * a.hidden;
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / a.hidden, j = i % a.hidden;
    const float g = to_float<T>(in[r * 2 * a.hidden + j]);
    const float u = to_float<T>(in[r * 2 * a.hidden + a.hidden + j]);
    out[i] = from_float<T>(g / (1.0f + __expf(-g)) * u);
  }
}

// One warp per (item, head); lane l holds values [4l, 4l + 4) of the head (pairs 2l, 2l + 1).
// Blocks of 4 warps: 4 heads of one item.
template <typename T>
__global__ void qkv_pack_kernel(QkvPackArgs a) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = blockIdx.x * 4 + warp;
  const int64_t item = blockIdx.y;
  if (head >= a.heads || item >= a.items) return;
  const int hd = a.head_dim, inner = a.heads * hd;
  const bool active = 4 * lane < hd;
  const T* row = static_cast<const T*>(a.qkv) + int64_t(a.src[item]) * 3 * inner + head * hd;
  const int64_t out_offset = int64_t(a.dest[item]) * inner + head * hd;
  // The angles of this lane's two pairs.
  float c[2] = {1.0f, 1.0f}, s[2] = {0.0f, 0.0f};
  if (a.rotate && active) {
    for (int p = 0; p < 2; ++p) {
      const int m = 2 * lane + p;
      if (m < 3 * a.freqs) {
        const float angle = a.pos[item * 3 + m / a.freqs] * a.freq[m % a.freqs];
        sincosf(angle, &s[p], &c[p]);
      }
    }
  }
  for (int which = 0; which < 3; ++which) {
    const T* in = row + which * inner;
    T* out = static_cast<T*>(which == 0 ? a.q_out : which == 1 ? a.k_out : a.v_out) + out_offset;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (active) {
      for (int j = 0; j < 4; ++j) x[j] = to_float<T>(in[4 * lane + j]);
    }
    if (which < 2) {
      const float sum = warp_sum(x[0] * x[0] + x[1] * x[1] + x[2] * x[2] + x[3] * x[3]);
      const float inv = rsqrtf(sum / float(hd) + a.eps);
      const float* w = which == 0 ? a.q_weight : a.k_weight;
      if (active) {
        for (int j = 0; j < 4; ++j) x[j] *= inv * w[4 * lane + j];
        for (int p = 0; p < 2; ++p) {
          const float e = x[2 * p], o = x[2 * p + 1];
          x[2 * p] = e * c[p] - o * s[p];
          x[2 * p + 1] = o * c[p] + e * s[p];
        }
      }
    }
    if (active) {
      for (int j = 0; j < 4; ++j) out[4 * lane + j] = from_float<T>(x[j]);
    }
  }
}

int blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return int(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

cudaError_t launch_rms_modulate(HalfType type, const RmsModulateArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 2147483647LL) return cudaErrorInvalidValue;
  if (type == HalfType::kBFloat16) {
    rms_modulate_kernel<__nv_bfloat16><<<unsigned(a.rows), kRowThreads, 0, stream>>>(a);
  } else {
    rms_modulate_kernel<__half><<<unsigned(a.rows), kRowThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

cudaError_t launch_gated_add(HalfType type, const GatedAddArgs& a, cudaStream_t stream) {
  const int64_t n = a.rows * a.dim;
  if (n <= 0) return cudaSuccess;
  if (type == HalfType::kBFloat16) {
    gated_add_kernel<__nv_bfloat16><<<blocks_for(n, 256), 256, 0, stream>>>(a);
  } else {
    gated_add_kernel<__half><<<blocks_for(n, 256), 256, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

cudaError_t launch_swiglu(HalfType type, const SwigluArgs& a, cudaStream_t stream) {
  const int64_t n = a.rows * a.hidden;
  if (n <= 0) return cudaSuccess;
  if (type == HalfType::kBFloat16) {
    swiglu_kernel<__nv_bfloat16><<<blocks_for(n, 256), 256, 0, stream>>>(a);
  } else {
    swiglu_kernel<__half><<<blocks_for(n, 256), 256, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

cudaError_t launch_qkv_pack(HalfType type, const QkvPackArgs& a, cudaStream_t stream) {
  if (a.items <= 0) return cudaSuccess;
  if (a.head_dim % 4 != 0 || a.head_dim > 128 || a.items > 65535LL * 65535LL) {
    return cudaErrorInvalidValue;
  }
  // Items along y (at most 65535 per launch: further launches offset the pointers).
  for (int64_t first = 0; first < a.items; first += 65535) {
    QkvPackArgs part = a;
    part.src = a.src + first;
    part.dest = a.dest + first;
    part.pos = a.pos ? a.pos + first * 3 : nullptr;
    part.items = a.items - first < 65535 ? a.items - first : 65535;
    const dim3 grid(unsigned((a.heads + 3) / 4), unsigned(part.items));
    if (type == HalfType::kBFloat16) {
      qkv_pack_kernel<__nv_bfloat16><<<grid, 128, 0, stream>>>(part);
    } else {
      qkv_pack_kernel<__half><<<grid, 128, 0, stream>>>(part);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace wm::models::seedvr2::cuda
