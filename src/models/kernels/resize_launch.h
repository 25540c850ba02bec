// Raw CUDA launcher of the separable Lanczos resize (src/models/resample/torch/lanczos_resize.h) on
// GPUs: one axis at a time, each output value a weighted sum of at most `taps` input values along
// the axis (src/models/kernels/resize_kernels.cu). Plain pointers and sizes, no LibTorch types, so
// the .cu file builds with nvcc alone; lanczos_resize.cpp builds the tables and checks the shapes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wm::models::cuda {

// in: float32 contiguous [outer, in_size, inner]; out: float32 contiguous [outer, out_size,
// inner]; out[o, j, r] = Σ_k weight[j·taps + k] · in[o, index[j·taps + k], r]. index and weight:
// device tables of out_size × taps entries (indices within [0, in_size)).
struct ResizeAxisArgs {
  const float* in = nullptr;
  float* out = nullptr;
  int64_t outer = 0;
  int64_t inner = 0;
  int in_size = 0;
  int out_size = 0;
  const int* index = nullptr;
  const float* weight = nullptr;
  int taps = 0;
};
cudaError_t launch_resize_axis(const ResizeAxisArgs& args, cudaStream_t stream);

}  // namespace wm::models::cuda
