#include "src/models/torchscript.h"

#include <torch/script.h>

#include "src/base/error.h"
#include "src/models/torch/scripted_model.h"
#include "src/models/torch/tensor.h"

namespace wm::models {
namespace {

constexpr int kProbe = 16;

class ScriptedModel;

class ScriptedSession : public ModelSession {
 public:
  explicit ScriptedSession(const ScriptedModel& model) : model_(model) {}
  Planar run(Planar&& input, const RunContext& ctx) override;

 private:
  const ScriptedModel& model_;
};

class ScriptedModel : public Model {
 public:
  ScriptedModel(std::string what, std::function<at::Tensor(const at::Tensor&)> forward,
                const ModelConfig& config, const Device& device)
      : what_(std::move(what)),
        forward_(std::move(forward)),
        device_(to_device(device)),
        dtype_(to_scalar_type(config.precision)) {
    const auto* options = dynamic_cast<const ScriptedOptions*>(config.options.get());
    // The probe: a smooth ramp, so a module that rejects constant input still runs.
    const at::Tensor probe = guarded("probe", [&] {
      return at::linspace(0, 1, 3 * kProbe * kProbe, at::kFloat).view({1, 3, kProbe, kProbe});
    });
    at::Tensor out;
    try {
      out = call(probe);
    } catch (const Error& e) {
      throw ModelError(what_ + ": the 1x3x16x16 probe failed: " + e.what());
    }
    if (out.dim() != 4 || out.size(0) != 1 || out.size(1) != 3 || out.size(2) % kProbe ||
        out.size(2) != out.size(3)) {
      throw ModelError(what_ + ": for a [1,3,16,16] probe the module returned " + shape_text(out) +
                       "; expected [1,3,16s,16s]");
    }
    const int scale = int(out.size(2) / kProbe);
    if (options && options->scale > 0 && options->scale != scale) {
      throw ModelError(what_ + ": the module upscales x" + std::to_string(scale) +
                       " (a 16x16 probe gave " + std::to_string(out.size(3)) + "x" +
                       std::to_string(out.size(2)) + "), but model.scale is " +
                       std::to_string(options->scale));
    }
    traits_.name = what_;
    traits_.scale_num = scale;
    traits_.halo_exact = options && options->halo >= 0;
    traits_.halo = traits_.halo_exact ? options->halo : kDefaultScriptedHalo;
    traits_.precisions = {config.precision};
  }

  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device&) const override {
    return std::make_unique<ScriptedSession>(*this);
  }

  // [T, 3, H, W] float32 host → [T, 3, sH, sW] float32 host.
  at::Tensor call(const at::Tensor& frames) const {
    return guarded(what_.c_str(), [&] {
      at::NoGradGuard no_grad;
      const at::Tensor y = forward_(frames.to(device_, dtype_));
      return y.to(at::kCPU, at::kFloat).contiguous();
    });
  }

 private:
  static std::string shape_text(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
    return s + "]";
  }

  std::string what_;
  std::function<at::Tensor(const at::Tensor&)> forward_;
  at::Device device_;
  at::ScalarType dtype_;
  ModelTraits traits_;
};

Planar ScriptedSession::run(Planar&& input, const RunContext&) {
  const ModelTraits& traits = model_.traits();
  if (input.channels != 3) {
    throw ModelError(traits.name + ": input has " + std::to_string(input.channels) +
                     " channels, expected 3 (RGB)");
  }
  const int t = input.frames, h = input.height, w = input.width;
  const at::Tensor frames = to_tensor(std::move(input))[0].permute({1, 0, 2, 3}).contiguous();
  const at::Tensor out = model_.call(frames);
  const int s = traits.scale_num;
  if (out.dim() != 4 || out.size(0) != t || out.size(1) != 3 || out.size(2) != int64_t(h) * s ||
      out.size(3) != int64_t(w) * s) {
    throw ModelError(traits.name + ": the module returned a tensor of another size than [" +
                     std::to_string(t) + ",3," + std::to_string(h * s) + "," +
                     std::to_string(w * s) + "]");
  }
  return to_planar(out.permute({1, 0, 2, 3}));
}

}  // namespace

std::unique_ptr<Model> make_scripted_model(const std::string& what,
                                           std::function<at::Tensor(const at::Tensor&)> forward,
                                           const ModelConfig& config, const Device& device) {
  return std::make_unique<ScriptedModel>(what, std::move(forward), config, device);
}

std::unique_ptr<Model> make_torchscript(const ModelConfig& config, const Device& device) {
  if (device.kind == Device::Kind::kCpu && config.precision != Precision::kFloat32) {
    throw ModelError(std::string("torchscript: precision ") + to_string(config.precision) +
                     " runs on GPUs only (use fp32 on the CPU)");
  }
  auto module = std::make_shared<torch::jit::Module>();
  try {
    *module = torch::jit::load(config.weights, to_device(device));
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    if (msg.find("open file failed") != std::string::npos) {
      throw InputError(config.weights + ": cannot open the TorchScript file", kExitNoInput);
    }
    throw ModelError(config.weights + ": not a TorchScript module (torch.jit.save): " +
                     msg.substr(0, msg.find('\n')));
  }
  module->eval();
  if (config.precision != Precision::kFloat32) module->to(to_scalar_type(config.precision));
  auto forward = [module](const at::Tensor& x) {
    const c10::IValue out = module->forward({x});
    if (!out.isTensor()) throw ModelError("the module's forward does not return a tensor");
    return out.toTensor();
  };
  return make_scripted_model(config.weights + " (torchscript)", forward, config, device);
}

}  // namespace wm::models
