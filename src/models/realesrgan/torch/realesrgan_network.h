// One Real-ESRGAN network's weights on a device and its forward pass (realesrgan.cpp), for the
// model and for the model-only benchmark (realesrgan_bench_support.cpp), which times the network
// alone. Immutable once made; forward may be called from several threads at once.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "src/models/realesrgan/realesrgan.h"
#include "src/models/realesrgan/torch/realesrgan_weights.h"

namespace wm::models {

class RealEsrganNetwork {
 public:
  virtual ~RealEsrganNetwork() = default;
  virtual const RealEsrganArch& arch() const = 0;
  // x [N, 3, H, W] on the network's device in its dtype (channels_last where it was made so) →
  // [N, 3, H·s, W·s] (raw values); float32 when `out_float`, else x's dtype.
  virtual at::Tensor forward(const at::Tensor& x, bool out_float = false) const = 0;
};

// `weights` moved to `device` in `dtype` (channels_last for 4-d weights when `channels_last`),
// with the execution choices of `tuning`.
std::unique_ptr<RealEsrganNetwork> make_realesrgan_network(RealEsrganWeights weights,
                                                           at::Device device, at::ScalarType dtype,
                                                           bool channels_last,
                                                           const RealEsrganTuning& tuning = {});

}  // namespace wm::models
