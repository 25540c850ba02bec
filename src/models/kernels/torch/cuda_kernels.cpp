#include "src/models/kernels/torch/cuda_kernels.h"

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <cublas_v2.h>

#include <algorithm>
#include <limits>
#include <string>

#include "src/base/error.h"
#include "src/models/kernels/cuda_launch.h"
#endif

namespace wm::models::cuda {

#ifndef WMBATCH_WITH_CUDA

bool kernels_available() { return false; }
bool rms_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, bool, double, int) {
  return false;
}
bool depth_to_space(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
bool attention_scores(const at::Tensor&, const at::Tensor&, double, const at::Tensor&) {
  return false;
}

#else

namespace {

bool dtype_of(const at::Tensor& t, DType& out) {
  switch (t.scalar_type()) {
    case at::kFloat:
      out = DType::kFloat32;
      return true;
    case at::kHalf:
      out = DType::kFloat16;
      return true;
    case at::kBFloat16:
      out = DType::kBFloat16;
      return true;
    default:
      return false;
  }
}

bool aligned(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// [1, C, T, H, W] with element (t, h, w, c) at t·HWC + h·WC + w·C + c.
bool pixel_major(const at::Tensor& t) {
  if (t.dim() != 5 || t.size(0) != 1) return false;
  const int64_t c = t.size(1), h = t.size(3), w = t.size(4);
  return (t.stride(1) == 1 || c == 1) && (t.stride(4) == c || w == 1) &&
         (t.stride(3) == w * c || h == 1) && (t.stride(2) == h * w * c || t.size(2) == 1);
}

// [1, C, T, H, W] with channels innermost and any frame, row and column strides that keep
// 16-byte alignment (a channels_last_3d tensor or a narrow() of one along T, H or W).
bool pixel_strided(const at::Tensor& t) {
  if (t.dim() != 5 || t.size(0) != 1 || (t.stride(1) != 1 && t.size(1) != 1)) return false;
  const int64_t elt = t.element_size();
  for (int d = 2; d < 5; ++d) {
    if (t.size(d) > 1 && (t.stride(d) < t.size(1) || (t.stride(d) * elt) % 16 != 0)) return false;
  }
  return true;
}

PixelStrides strides_of(const at::Tensor& t) { return {t.stride(2), t.stride(3), t.stride(4)}; }

bool usable(const at::Tensor& t, const at::Tensor& like) {
  return t.is_cuda() && t.device() == like.device() && t.scalar_type() == like.scalar_type() &&
         aligned(t) && t.sizes() == like.sizes() && pixel_strided(t);
}

bool usable_vector(const at::Tensor& t, const at::Tensor& like, int64_t n) {
  return t.is_cuda() && t.device() == like.device() && t.scalar_type() == like.scalar_type() &&
         aligned(t) && t.numel() == n && t.is_contiguous();
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw ModelError(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

}  // namespace

bool kernels_available() { return true; }

bool rms_norm(const at::Tensor& x, const at::Tensor& bias, const at::Tensor& residual,
              const at::Tensor& gamma, const at::Tensor& out, const at::Tensor& sum_out, bool silu,
              double eps, int threads_per_pixel) {
  DType dtype;
  if (!x.is_cuda() || !dtype_of(x, dtype) || !aligned(x) || !pixel_strided(x)) return false;
  const int64_t c = x.size(1);
  if (x.numel() / std::max<int64_t>(c, 1) >= (int64_t(1) << 31)) return false;
  if ((c * int64_t(x.element_size())) % 16 != 0) return false;
  if (bias.defined() && !usable_vector(bias, x, c)) return false;
  if (residual.defined() && !usable(residual, x)) return false;
  if (out.defined() && (!usable(out, x) || !gamma.defined() || !usable_vector(gamma, x, c))) {
    return false;
  }
  if (sum_out.defined() && !usable(sum_out, x)) return false;
  if (!out.defined() && !sum_out.defined()) return true;
  NormArgs a;
  a.x = x.data_ptr();
  a.bias = bias.defined() ? bias.data_ptr() : nullptr;
  a.residual = residual.defined() ? residual.data_ptr() : nullptr;
  a.gamma = gamma.defined() ? gamma.data_ptr() : nullptr;
  a.out = out.defined() ? out.data_ptr() : nullptr;
  a.sum_out = sum_out.defined() ? sum_out.data_ptr() : nullptr;
  a.x_strides = strides_of(x);
  if (residual.defined()) a.residual_strides = strides_of(residual);
  if (out.defined()) a.out_strides = strides_of(out);
  if (sum_out.defined()) a.sum_strides = strides_of(sum_out);
  a.frames = int(x.size(2));
  a.height = int(x.size(3));
  a.width = int(x.size(4));
  a.channels = int(c);
  a.threads_per_pixel = threads_per_pixel;
  a.eps = float(eps);
  a.silu = silu;
  check(launch_rms_norm(dtype, a, c10::cuda::getCurrentCUDAStream(x.get_device()).stream()),
        "wan2.1-vae: rms_norm kernel");
  return true;
}

bool depth_to_space(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& out) {
  DType dtype;
  if (!y.is_cuda() || !dtype_of(y, dtype) || !aligned(y) || !pixel_major(y)) return false;
  if (out.dim() != 5 || !out.is_cuda() || out.scalar_type() != y.scalar_type() || !aligned(out) ||
      !pixel_major(out)) {
    return false;
  }
  const int64_t c = out.size(1), t = out.size(2), h = out.size(3) / 2, w = out.size(4) / 2;
  if (y.size(1) != 4 * c || y.size(2) != t || y.size(3) != h + 1 || y.size(4) != w + 1 ||
      out.size(3) != 2 * h || out.size(4) != 2 * w) {
    return false;
  }
  if ((c * int64_t(y.element_size())) % 16 != 0) return false;
  if (bias.defined() && !usable_vector(bias, y, c)) return false;
  DepthToSpaceArgs a;
  a.y = y.data_ptr();
  a.bias = bias.defined() ? bias.data_ptr() : nullptr;
  a.out = out.data_ptr();
  a.frames = t;
  a.height = int(h);
  a.width = int(w);
  a.channels = int(c);
  check(launch_depth_to_space(dtype, a, c10::cuda::getCurrentCUDAStream(y.get_device()).stream()),
        "wan2.1-vae: depth_to_space kernel");
  return true;
}

bool attention_scores(const at::Tensor& q, const at::Tensor& k, double scale,
                      const at::Tensor& out) {
  const at::ScalarType dt = q.scalar_type();
  if (dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (!q.is_cuda() || k.device() != q.device() || out.device() != q.device()) return false;
  if (k.scalar_type() != dt || out.scalar_type() != at::kFloat) return false;
  if (q.dim() != 2 || k.dim() != 2 || out.dim() != 2 || !out.is_contiguous()) return false;
  const int64_t rows = q.size(0), keys = k.size(0), d = q.size(1);
  if (k.size(1) != d || out.size(0) != rows || out.size(1) != keys) return false;
  if (q.stride(1) != 1 || k.stride(1) != 1 || q.stride(0) < d || k.stride(0) < d) return false;
  const int64_t limit = std::numeric_limits<int>::max();
  if (rows > limit || keys > limit || d > limit || q.stride(0) > limit || k.stride(0) > limit)
    return false;
  const cudaDataType_t type = dt == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = float(scale), beta = 0.0f;
  // Column-major view: outᵀ [keys × rows] = k [keys × d] · qᵀ [d × rows], k and q read as their
  // row-major buffers (= column-major transposes).
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();  // on the current stream
  const cublasStatus_t status = cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, int(keys), int(rows), int(d), &alpha, k.data_ptr(), type,
      int(k.stride(0)), q.data_ptr(), type, int(q.stride(0)), &beta, out.data_ptr(), CUDA_R_32F,
      int(keys), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw ModelError("attention scores: cublasGemmEx failed with status " +
                     std::to_string(int(status)));
  }
  return true;
}

#endif

}  // namespace wm::models::cuda
