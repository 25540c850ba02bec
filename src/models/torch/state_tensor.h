// at::Tensor ↔ StateTensor (src/model.h): the causal state of a session as host bytes, for the
// snapshots farm chunks save between chunks. Included by model implementations only.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "src/model.h"

namespace wm::models {

// A copy of `t` (any device, dtype F32/BF16/F16/F64/I64) on the host, in logical row-major
// order, remembering a channels-last-3d layout. Waits for the device's work on `t`.
StateTensor export_tensor(const std::string& name, const at::Tensor& t);
// The tensor `s` holds, on `device`, in its recorded layout. Undefined tensor when the dtype is
// unknown or the byte count does not match the shape.
at::Tensor import_tensor(const StateTensor& s, const at::Device& device);

}  // namespace wm::models
