// The search gate (search_gate.h) for ATen's convolutions: conv_search_pass(x, weight, ...) before
// a convolution that cuDNN may search for (a CUDA tensor with benchmark mode on); an empty pass
// otherwise. Include only from LibTorch translation units.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "src/exec/search_gate.h"

namespace wm::exec {

// What picks cuDNN's plan for a convolution of `x` with `weight`: both tensors' sizes and strides
// (the memory layout), the dtype, padding and stride.
inline uint64_t conv_shape(const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef padding,
                           at::IntArrayRef stride) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const at::Tensor* t : {&x, &weight}) {
    h = shape_hash(h, uint64_t(t->dim()));
    for (int64_t v : t->sizes()) h = shape_hash(h, uint64_t(v));
    for (int64_t v : t->strides()) h = shape_hash(h, uint64_t(v));
  }
  h = shape_hash(h, uint64_t(x.scalar_type()));
  for (at::IntArrayRef list : {padding, stride}) {
    h = shape_hash(h, uint64_t(list.size()));
    for (int64_t v : list) h = shape_hash(h, uint64_t(v));
  }
  return h;
}

inline SearchPass conv_search_pass(const at::Tensor& x, const at::Tensor& weight,
                                   at::IntArrayRef padding, at::IntArrayRef stride = {}) {
  if (!x.is_cuda() || !at::globalContext().benchmarkCuDNN()) return {};
  return search_gate(x.get_device(), conv_shape(x, weight, padding, stride));
}

}  // namespace wm::exec
