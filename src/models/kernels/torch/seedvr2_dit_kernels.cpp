#include "src/models/kernels/torch/seedvr2_dit_kernels.h"

#ifdef WMBATCH_SEEDVR2_DIT_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "src/base/error.h"
#include "src/models/kernels/seedvr2_dit_launch.h"
#endif

namespace wm::models::seedvr2::cuda {

#ifndef WMBATCH_SEEDVR2_DIT_KERNELS

bool dit_kernels_available() { return false; }
at::Tensor rms_modulate(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType,
                        double) {
  return {};
}
bool gated_add(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor swiglu(const at::Tensor&) { return {}; }
bool qkv_pack(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, int, double,
              const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  return false;
}

#else

namespace {

bool half_type(at::ScalarType t, HalfType& out) {
  if (t == at::kBFloat16) {
    out = HalfType::kBFloat16;
    return true;
  }
  if (t == at::kHalf) {
    out = HalfType::kFloat16;
    return true;
  }
  return false;
}

// A float32 vector of `n` on the device of `like`, contiguous; undefined stays undefined.
bool vector_ok(const at::Tensor& v, int64_t n, const at::Tensor& like) {
  return !v.defined() ||
         (v.is_cuda() && v.device() == like.device() && v.scalar_type() == at::kFloat &&
          v.dim() == 1 && v.size(0) == n && v.is_contiguous());
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw ModelError(std::string("seedvr2 dit: ") + what + ": " + cudaGetErrorString(e));
  }
}

cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace

bool dit_kernels_available() { return true; }

at::Tensor rms_modulate(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                        at::ScalarType dtype, double eps) {
  HalfType type;
  if (!half_type(dtype, type) || !x.is_cuda() || x.scalar_type() != at::kFloat || x.dim() != 2 ||
      !x.is_contiguous() || x.size(1) > (1 << 20)) {
    return {};
  }
  const at::Tensor s = scale.defined() ? scale.contiguous() : scale;
  const at::Tensor b = shift.defined() ? shift.contiguous() : shift;
  if (!vector_ok(s, x.size(1), x) || !vector_ok(b, x.size(1), x)) return {};
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(dtype));
  RmsModulateArgs a;
  a.x = x.data_ptr<float>();
  a.out = out.data_ptr();
  a.scale = s.defined() ? s.data_ptr<float>() : nullptr;
  a.shift = b.defined() ? b.data_ptr<float>() : nullptr;
  a.rows = x.size(0);
  a.dim = int(x.size(1));
  a.eps = float(eps);
  check(launch_rms_modulate(type, a, stream_of(x)), "rms_modulate");
  return out;
}

bool gated_add(const at::Tensor& v, const at::Tensor& y, const at::Tensor& gate) {
  HalfType type;
  if (!half_type(y.scalar_type(), type) || !v.is_cuda() || v.scalar_type() != at::kFloat ||
      v.dim() != 2 || !v.is_contiguous() || y.sizes() != v.sizes() || !y.is_contiguous() ||
      y.device() != v.device()) {
    return false;
  }
  const at::Tensor g = gate.defined() ? gate.contiguous() : gate;
  if (!vector_ok(g, v.size(1), v)) return false;
  GatedAddArgs a;
  a.v = v.data_ptr<float>();
  a.y = y.data_ptr();
  a.gate = g.defined() ? g.data_ptr<float>() : nullptr;
  a.rows = v.size(0);
  a.dim = int(v.size(1));
  check(launch_gated_add(type, a, stream_of(v)), "gated_add");
  return true;
}

at::Tensor swiglu(const at::Tensor& in) {
  HalfType type;
  if (!half_type(in.scalar_type(), type) || !in.is_cuda() || in.dim() != 2 || !in.is_contiguous() ||
      in.size(1) % 2 != 0) {
    return {};
  }
  at::Tensor out = at::empty({in.size(0), in.size(1) / 2}, in.options());
  SwigluArgs a;
  a.in = in.data_ptr();
  a.out = out.data_ptr();
  a.rows = in.size(0);
  a.hidden = int(in.size(1) / 2);
  check(launch_swiglu(type, a, stream_of(in)), "swiglu");
  return out;
}

bool qkv_pack(const at::Tensor& qkv, const at::Tensor& src, const at::Tensor& dest,
              const at::Tensor& pos, const at::Tensor& q_weight, const at::Tensor& k_weight,
              const at::Tensor& freq, bool rotate, int heads, double eps, const at::Tensor& q_out,
              const at::Tensor& k_out, const at::Tensor& v_out) {
  HalfType type;
  if (!half_type(qkv.scalar_type(), type) || !qkv.is_cuda() || qkv.dim() != 2 ||
      !qkv.is_contiguous() || heads <= 0 || qkv.size(1) % (3 * heads) != 0) {
    return false;
  }
  const int64_t hd = qkv.size(1) / (3 * heads);
  if (hd % 4 != 0 || hd > 128) return false;
  for (const at::Tensor* o : {&q_out, &k_out, &v_out}) {
    if (!o->is_cuda() || o->scalar_type() != qkv.scalar_type() || !o->is_contiguous() ||
        o->numel() % (heads * hd) != 0) {
      return false;
    }
  }
  const int64_t items = src.numel();
  if (src.scalar_type() != at::kInt || dest.scalar_type() != at::kInt || dest.numel() != items ||
      !src.is_contiguous() || !dest.is_contiguous() || !vector_ok(q_weight, hd, qkv) ||
      !vector_ok(k_weight, hd, qkv) || !q_weight.defined() || !k_weight.defined()) {
    return false;
  }
  if (rotate && (!pos.defined() || pos.scalar_type() != at::kFloat || !pos.is_contiguous() ||
                 pos.numel() != 3 * items || !vector_ok(freq, freq.numel(), qkv) ||
                 !freq.defined() || 6 * freq.numel() > hd)) {
    return false;
  }
  QkvPackArgs a;
  a.qkv = qkv.data_ptr();
  a.q_out = q_out.data_ptr();
  a.k_out = k_out.data_ptr();
  a.v_out = v_out.data_ptr();
  a.src = src.data_ptr<int32_t>();
  a.dest = dest.data_ptr<int32_t>();
  a.pos = rotate ? pos.data_ptr<float>() : nullptr;
  a.q_weight = q_weight.data_ptr<float>();
  a.k_weight = k_weight.data_ptr<float>();
  a.freq = rotate ? freq.data_ptr<float>() : nullptr;
  a.items = items;
  a.heads = heads;
  a.head_dim = int(hd);
  a.freqs = rotate ? int(freq.numel()) : 0;
  a.rotate = rotate;
  a.eps = float(eps);
  check(launch_qkv_pack(type, a, stream_of(qkv)), "qkv_pack");
  return true;
}

#endif

}  // namespace wm::models::seedvr2::cuda
