#include "src/models/torch/tensor.h"

#include <ATen/Parallel.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "src/base/error.h"

namespace wm::models {

at::Tensor to_tensor(Planar&& p) {
  auto* owner = new Planar(std::move(p));
  return at::from_blob(
      owner->data.data(), {1, owner->channels, owner->frames, owner->height, owner->width},
      [owner](void*) { delete owner; }, at::TensorOptions().dtype(at::kFloat));
}

Planar to_planar(const at::Tensor& t) {
  at::Tensor x = t;
  if (x.dim() == 5) {
    if (x.size(0) != 1) throw ModelError("to_planar: batch size must be 1");
    x = x.squeeze(0);
  }
  if (x.dim() != 4) throw ModelError("to_planar: expected a [C,T,H,W] tensor");
  x = x.to(at::kCPU, at::kFloat).contiguous();
  Planar out(int(x.size(0)), int(x.size(1)), int(x.size(2)), int(x.size(3)));
  std::memcpy(out.data.data(), x.data_ptr<float>(), out.data.size() * sizeof(float));
  return out;
}

Planar to_slice_output(Planar part, const RunContext& ctx) {
  if (!ctx.into) return part;
  if (ctx.into_ready.valid()) ctx.into_ready.get();
  if (!place(part, *ctx.into, ctx.into_frame, ctx.into_row)) {
    throw ModelError("a rank's part does not fit the split slice's output");
  }
  return Planar();
}

void use_all_cpu_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int cores = int(std::thread::hardware_concurrency());
    if (cores > at::get_num_threads()) at::set_num_threads(cores);
  });
}

at::ScalarType to_scalar_type(Precision p) {
  switch (p) {
    case Precision::kBFloat16:
      return at::kBFloat16;
    case Precision::kFloat16:
      return at::kHalf;
    case Precision::kFloat32:
    default:
      return at::kFloat;
  }
}

at::Device to_device(const Device& d) {
  return d.kind == Device::Kind::kCuda ? at::Device(at::kCUDA, d.index) : at::Device(at::kCPU);
}

}  // namespace wm::models
