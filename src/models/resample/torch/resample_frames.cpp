// The built-in resampler on a GPU: its sessions resample Planar slices on the device
// (resample_torch), and, as an exec::DeviceFrameModel, it takes RGB frames already on the device
// (the device frame path of video jobs, parallel/frame_path.h): the frames are decoded, converted
// and resized on the GPU, with no float frames on the host. Same convolutions both ways.
#include "src/models/resample/torch/resample_frames.h"

#include <ATen/ATen.h>

#include <map>
#include <mutex>
#include <string>

#include "src/exec/device_frames.h"
#include "src/models/resample/resample.h"
#include "src/models/resample/torch/resample_conv.h"
#include "src/models/torch/tensor.h"

namespace wm::models {
namespace {

class GpuResampleSession : public ModelSession {
 public:
  GpuResampleSession(const ResampleKernel& kernel, const Device& device)
      : kernel_(kernel), device_(device) {}
  Planar run(Planar&& input, const RunContext&) override {
    return resample_torch(kernel_, std::move(input), device_);
  }

 private:
  ResampleKernel kernel_;
  Device device_;
};

class GpuResampleModel : public Model, public exec::DeviceFrameModel {
 public:
  GpuResampleModel(const std::string& kind, int scale)
      : kernel_(resample_kernel(kind, scale)), traits_(resampler_traits(kind, kernel_)) {
    traits_.device_frames = true;
  }
  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device& device) const override {
    return std::make_unique<GpuResampleSession>(kernel_, device);
  }

  at::ScalarType frame_dtype() const override { return at::kFloat; }
  at::Tensor upscale_frames(const at::Tensor& rgb) const override {
    const int64_t t = rgb.size(0), c = rgb.size(1), h = rgb.size(2), w = rgb.size(3);
    const at::Tensor planes = rgb.to(at::kFloat).contiguous().view({t * c, 1, h, w});
    const at::Tensor out = resample_planes(kernel_, weights(rgb.device()), planes);
    return out.view({t, c, h * kernel_.scale, w * kernel_.scale});
  }
  // The device frame path splits a call that does not fit (its out-of-memory retry); frames of
  // a slice are small beside a network's activations.
  int64_t frames_per_call(int64_t frames, int64_t, int64_t, int64_t) const override {
    return frames;
  }

 private:
  // The kernel's weights on `device`, uploaded once per device (the model may be shared by
  // the sessions of several workers).
  at::Tensor weights(const at::Device& device) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key = device.str();
    auto it = weights_.find(key);
    if (it == weights_.end()) it = weights_.emplace(key, resample_weights(kernel_, device)).first;
    return it->second;
  }

  ResampleKernel kernel_;
  ModelTraits traits_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, at::Tensor> weights_;
};

}  // namespace

std::unique_ptr<Model> make_gpu_resampler(const ModelConfig& config, const Device&) {
  return std::make_unique<GpuResampleModel>(config.kind, config.scale);
}

}  // namespace wm::models
