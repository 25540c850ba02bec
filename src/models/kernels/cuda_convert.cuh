// float ↔ the run dtypes (float, __half, __nv_bfloat16) in device (and host) code, shared by the
// models' Torch-free CUDA kernels and their benchmark: arithmetic in float32, one round-to-nearest
// at the store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace wm::models::cuda {

template <typename T>
__host__ __device__ __forceinline__ float to_f(T v);
template <>
__host__ __device__ __forceinline__ float to_f<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__host__ __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__host__ __device__ __forceinline__ T from_f(float v);
template <>
__host__ __device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__host__ __device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace wm::models::cuda
