// What the device frame path (parallel/frame_path.h) asks of a model: RGB frames already on the
// model's device in, upscaled RGB frames out, on the same device and the current stream, with
// no host copies. A model that can declares ModelTraits::device_frames and derives from this
// (src/models/realesrgan/torch/realesrgan.cpp). Include only from LibTorch translation units.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace wm::exec {

class DeviceFrameModel {
 public:
  virtual ~DeviceFrameModel() = default;
  // The dtype the model computes in: frames handed over in it need no conversion.
  virtual at::ScalarType frame_dtype() const = 0;
  // rgb [T, 3, H, W] in [0, 1] on the model's device → [T, 3, H·s, W·s] float32 there (s: the
  // model's output scale, its resize after the network included), unclamped. Throws what
  // LibTorch throws (c10::OutOfMemoryError when the call does not fit: the caller splits it).
  virtual at::Tensor upscale_frames(const at::Tensor& rgb) const = 0;
  // Frames of height × width per call that fit under `cap` bytes of device memory
  // (DeviceContext::device_memory_cap: what the sessions there may plan with, before what is
  // allocated) where the job asked for automatic sizing (`tiling: auto`); `frames` otherwise.
  virtual int64_t frames_per_call(int64_t frames, int64_t height, int64_t width,
                                  int64_t cap) const = 0;
};

}  // namespace wm::exec
