// Planar ↔ at::Tensor. The only bridge between the torch-free interface (src/model.h) and
// LibTorch; included by model implementations only.
#pragma once

#include <ATen/ATen.h>

#include "src/base/planar.h"
#include "src/model.h"

namespace wm::models {

// Wraps `p` as a [1, C, T, H, W] float32 CPU tensor that owns p's memory (no copy).
at::Tensor to_tensor(Planar&& p);
// Copies a [C,T,H,W] or [1,C,T,H,W] tensor (any dtype/device) into a float32 host Planar.
Planar to_planar(const at::Tensor& t);
// A rank of a split slice (RunContext::into): `part` goes into frames [into_frame, +T) and rows
// [into_row, +H) of *ctx.into, and the rank returns the empty Planar this gives; without
// ctx.into, `part` itself.
Planar to_slice_output(Planar part, const RunContext& ctx);
at::ScalarType to_scalar_type(Precision p);
at::Device to_device(const Device& d);
// Lets LibTorch's CPU ops use every core (Debian's build starts with one thread). Idempotent.
void use_all_cpu_threads();
// Runs `fn`, converting c10::Error into ModelError with `what` as context.
template <typename Fn>
auto guarded(const char* what, Fn&& fn) -> decltype(fn());

}  // namespace wm::models

#include "src/models/torch/tensor_inl.h"
