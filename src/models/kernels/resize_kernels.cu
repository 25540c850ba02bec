// The separable Lanczos resize's axis pass on CUDA (resize_launch.h). Memory-bound: every output
// reads `taps` inputs of its row (the last axis: neighbouring threads read neighbouring inputs)
// or of its column (an outer axis: neighbouring threads read neighbouring columns, coalesced).
#include "src/models/kernels/resize_launch.h"

namespace wm::models::cuda {
namespace {

__global__ void resize_axis_kernel(ResizeAxisArgs a) {
  const int64_t total = a.outer * int64_t(a.out_size) * a.inner;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i % a.inner;
    const int64_t j = (i / a.inner) % a.out_size;
    const int64_t o = i / (a.inner * a.out_size);
    const float* src = a.in + o * int64_t(a.in_size) * a.inner + r;
    const int* index = a.index + j * a.taps;
    const float* weight = a.weight + j * a.taps;
    float sum = 0.f;
    for (int k = 0; k < a.taps; ++k) sum = fmaf(weight[k], src[int64_t(index[k]) * a.inner], sum);
    a.out[i] = sum;
  }
}

}  // namespace

cudaError_t launch_resize_axis(const ResizeAxisArgs& args, cudaStream_t stream) {
  const int64_t total = args.outer * int64_t(args.out_size) * args.inner;
  if (total <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t wanted = (total + threads - 1) / threads;
  const int blocks = int(wanted < 65535 * 8 ? wanted : 65535 * 8);
  resize_axis_kernel<<<blocks, threads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace wm::models::cuda
