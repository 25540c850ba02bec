#include "src/models/kernels/torch/seedvr2_kernels.h"

#ifdef WMBATCH_SEEDVR2_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "src/base/error.h"
#include "src/models/kernels/seedvr2_launch.h"
#endif

namespace wm::models::seedvr2::cuda {

#ifndef WMBATCH_SEEDVR2_KERNELS

bool group_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, int, double, bool,
                const at::Tensor&) {
  return false;
}

#else

namespace {

// Each frame packed channels-last: (h, w, c) at h·WC + w·C + c; frames any 16-byte-aligned
// stride.
bool frames_packed(const at::Tensor& t) {
  if (t.dim() != 5 || t.size(0) != 1 || !t.is_cuda()) return false;
  const int64_t c = t.size(1), h = t.size(3), w = t.size(4);
  if (t.stride(1) != 1 || (w > 1 && t.stride(4) != c) || (h > 1 && t.stride(3) != w * c)) {
    return false;
  }
  if (t.size(2) > 1 && t.stride(2) < h * w * c) return false;
  return (t.stride(2) * t.element_size()) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

}  // namespace

bool group_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, int groups,
                double eps, bool silu, const at::Tensor& out) {
  DType dtype;
  switch (x.scalar_type()) {
    case at::kFloat:
      dtype = DType::kFloat32;
      break;
    case at::kHalf:
      dtype = DType::kFloat16;
      break;
    case at::kBFloat16:
      dtype = DType::kBFloat16;
      break;
    default:
      return false;
  }
  if (!frames_packed(x) || !frames_packed(out) || out.sizes() != x.sizes() ||
      out.scalar_type() != x.scalar_type() || out.device() != x.device()) {
    return false;
  }
  const int64_t c = x.size(1), t = x.size(2);
  const int vec = 16 / int(x.element_size());
  if (c > 1024 || c % vec != 0 || (256 * vec) % c != 0 || groups <= 0 || c % groups != 0 ||
      t > 65535) {
    return false;
  }
  if (x.numel() == 0) return true;
  const at::Tensor w = weight.to(x.device(), at::kFloat).contiguous();
  const at::Tensor b = bias.to(x.device(), at::kFloat).contiguous();
  const at::Tensor sums = at::empty({2 * t * groups}, x.options().dtype(at::kDouble));
  const int blocks = group_norm_blocks(x.size(3) * x.size(4), int(c), int(x.element_size()));
  const at::Tensor partials = at::empty({2 * t * blocks * groups}, x.options().dtype(at::kDouble));
  const at::Tensor affine = at::empty({2 * t * c}, x.options().dtype(at::kFloat));
  GroupNormArgs a;
  a.x = x.data_ptr();
  a.out = out.data_ptr();
  a.weight = w.data_ptr<float>();
  a.bias = b.data_ptr<float>();
  a.sums = sums.data_ptr<double>();
  a.partials = partials.data_ptr<double>();
  a.affine = affine.data_ptr<float>();
  a.x_frame_stride = x.stride(2);
  a.out_frame_stride = out.stride(2);
  a.pixels = x.size(3) * x.size(4);
  a.frames = int(t);
  a.channels = int(c);
  a.groups = groups;
  a.eps = float(eps);
  a.silu = silu;
  const c10::cuda::CUDAGuard guard(x.device());  // a launch goes to the current device
  const cudaError_t err =
      launch_group_norm(dtype, a, c10::cuda::getCurrentCUDAStream(x.get_device()).stream());
  if (err != cudaSuccess) {
    throw ModelError(std::string("seedvr2-vae: group_norm kernel: ") + cudaGetErrorString(err));
  }
  return true;
}

#endif

}  // namespace wm::models::seedvr2::cuda
