#include "src/models/torch/state_tensor.h"

#include <cstring>

namespace wm::models {

namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "F32";
    case at::kBFloat16:
      return "BF16";
    case at::kHalf:
      return "F16";
    case at::kDouble:
      return "F64";
    case at::kLong:
      return "I64";
    default:
      return nullptr;
  }
}

at::ScalarType dtype_of(const std::string& name) {
  if (name == "F32") return at::kFloat;
  if (name == "BF16") return at::kBFloat16;
  if (name == "F16") return at::kHalf;
  if (name == "F64") return at::kDouble;
  if (name == "I64") return at::kLong;
  return at::ScalarType::Undefined;
}

}  // namespace

StateTensor export_tensor(const std::string& name, const at::Tensor& t) {
  StateTensor s;
  s.name = name;
  const char* dtype = dtype_name(t.scalar_type());
  if (!dtype) throw std::invalid_argument("state tensor " + name + ": unsupported dtype");
  s.dtype = dtype;
  s.shape.assign(t.sizes().begin(), t.sizes().end());
  s.channels_last =
      t.dim() == 5 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
  // .cpu() orders after the current stream's work on `t`; contiguous() gives logical order.
  const at::Tensor host = t.to(at::kCPU).contiguous();
  s.bytes.resize(size_t(host.numel()) * host.element_size());
  if (!s.bytes.empty()) std::memcpy(s.bytes.data(), host.data_ptr(), s.bytes.size());
  return s;
}

at::Tensor import_tensor(const StateTensor& s, const at::Device& device) {
  const at::ScalarType dtype = dtype_of(s.dtype);
  if (dtype == at::ScalarType::Undefined) return {};
  int64_t numel = 1;
  for (int64_t v : s.shape) {
    if (v < 0) return {};
    numel *= v;
  }
  at::Tensor host = at::empty(s.shape, at::TensorOptions().dtype(dtype));
  if (size_t(numel) * host.element_size() != s.bytes.size()) return {};
  if (!s.bytes.empty()) std::memcpy(host.data_ptr(), s.bytes.data(), s.bytes.size());
  if (s.channels_last && host.dim() == 5) host = host.contiguous(at::MemoryFormat::ChannelsLast3d);
  return device.is_cpu() ? host : host.to(device);
}

}  // namespace wm::models
