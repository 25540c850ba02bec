// The Real-ESRGAN networks' forward passes (../shared/upscalers-spec.md) and the model/session
// around them. Weights and their layout: realesrgan_weights.cpp.
#include "src/models/realesrgan.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "src/base/error.h"
#include "src/models/lanczos_resize.h"
#include "src/models/realesrgan_weights.h"
#include "src/models/tensor.h"
#include "src/models/wan21_bench_support.h"

namespace wm::models {

std::string RealEsrganArch::describe() const {
  if (family == Family::kSrvgg) {
    return "SRVGGNetCompact(features " + std::to_string(features) + ", convs " +
           std::to_string(convs) + ", PReLU, x" + std::to_string(scale) + ")";
  }
  return "RRDBNet(features " + std::to_string(features) + ", blocks " + std::to_string(blocks) +
         ", growth " + std::to_string(growth) + ", x" + std::to_string(scale) + ")";
}

int RealEsrganArch::exact_halo() const {
  if (family == Family::kSrvgg) return convs + 2;
  const int unshuffle = scale == 2 ? 2 : scale == 1 ? 4 : 1;
  return unshuffle * (15 * blocks + 4);
}

double RealEsrganArch::flops_per_input_pixel() const {
  const double f = features, k = 9;
  if (family == Family::kSrvgg) {
    const double out = 3.0 * scale * scale;
    return 2 * k * (3 * f + convs * f * f + f * out);
  }
  const double g = growth;
  const double u = scale == 2 ? 2 : scale == 1 ? 4 : 1;
  // Body at 1/u² of the input pixels; the tail at 4×4/u² ... per input pixel.
  double rdb = 0;
  for (int c = 0; c < 4; ++c) rdb += (f + c * g) * g;
  rdb += (f + 4 * g) * f;
  const double body = (3 * u * u * f + blocks * 3 * rdb + f * f) / (u * u);
  const double tail = (f * f * 4 + (f * f + f * f + f * 3) * 16) / (u * u);
  return 2 * k * (body + tail);
}

RealEsrganArch realesrgan_preset(const std::string& name) {
  RealEsrganArch a;
  if (name == "realesr-animevideov3" || name == "realesr-general-x4v3") {
    a.family = RealEsrganArch::Family::kSrvgg;
    a.convs = name == "realesr-animevideov3" ? 16 : 32;
    return a;
  }
  a.family = RealEsrganArch::Family::kRrdb;
  if (name == "RealESRGAN_x4plus") return a;
  if (name == "RealESRGAN_x2plus") {
    a.scale = 2;
    return a;
  }
  if (name == "RealESRGAN_x4plus_anime_6B") {
    a.blocks = 6;
    return a;
  }
  throw ModelError("unknown Real-ESRGAN model '" + name +
                   "' (known: realesr-animevideov3, realesr-general-x4v3, RealESRGAN_x4plus, "
                   "RealESRGAN_x2plus, RealESRGAN_x4plus_anime_6B)");
}

namespace {

at::Tensor conv(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return at::conv2d(x, w, b, /*stride=*/1, /*padding=*/1);
}

at::Tensor lrelu(const at::Tensor& x) { return at::leaky_relu(x, 0.2); }

// Nearest-neighbour ×k: every pixel a k×k block.
at::Tensor nearest(const at::Tensor& x, int k) {
  const auto n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.view({n, c, h, 1, w, 1}).expand({n, c, h, k, w, k}).reshape({n, c, h * k, w * k});
}

// The weights of one network on its device, in its dtype and memory format.
class Network {
 public:
  Network(RealEsrganWeights weights, at::Device device, at::ScalarType dtype, bool channels_last)
      : arch_(weights.arch), channels_last_(channels_last) {
    for (auto& [name, t] : weights.tensors) {
      at::Tensor w = t.to(device, dtype);
      if (channels_last && w.dim() == 4) w = w.contiguous(at::MemoryFormat::ChannelsLast);
      tensors_[name] = w;
    }
  }
  const RealEsrganArch& arch() const { return arch_; }

  // x [N, 3, H, W] → [N, 3, H·s, W·s] (raw values).
  at::Tensor forward(const at::Tensor& x) const {
    return arch_.family == RealEsrganArch::Family::kSrvgg ? srvgg(x) : rrdb(x);
  }

 private:
  const at::Tensor& w(const std::string& name) const { return tensors_.at(name); }
  at::Tensor conv_named(const at::Tensor& x, const std::string& name) const {
    return conv(x, w(name + ".weight"), w(name + ".bias"));
  }

  at::Tensor srvgg(const at::Tensor& x) const {
    at::Tensor t = x;
    for (int i = 0; i <= arch_.convs; ++i) {
      t = conv_named(t, "body." + std::to_string(2 * i));
      t = at::prelu(t, w("body." + std::to_string(2 * i + 1) + ".weight"));
    }
    t = conv_named(t, "body." + std::to_string(2 * arch_.convs + 2));
    return at::pixel_shuffle(t, arch_.scale) + nearest(x, arch_.scale);
  }

  at::Tensor rdb(const at::Tensor& x, const std::string& p) const {
    const at::Tensor x1 = lrelu(conv_named(x, p + "conv1"));
    const at::Tensor x2 = lrelu(conv_named(at::cat({x, x1}, 1), p + "conv2"));
    const at::Tensor x3 = lrelu(conv_named(at::cat({x, x1, x2}, 1), p + "conv3"));
    const at::Tensor x4 = lrelu(conv_named(at::cat({x, x1, x2, x3}, 1), p + "conv4"));
    const at::Tensor x5 = conv_named(at::cat({x, x1, x2, x3, x4}, 1), p + "conv5");
    return x5 * 0.2 + x;
  }

  at::Tensor rrdb(const at::Tensor& x) const {
    at::Tensor f = x;
    const int unshuffle = arch_.scale == 2 ? 2 : arch_.scale == 1 ? 4 : 1;
    if (unshuffle > 1) f = at::pixel_unshuffle(x, unshuffle);
    if (channels_last_) f = f.contiguous(at::MemoryFormat::ChannelsLast);
    f = conv_named(f, "conv_first");
    at::Tensor t = f;
    for (int i = 0; i < arch_.blocks; ++i) {
      const std::string b = "body." + std::to_string(i) + ".";
      at::Tensor r = rdb(t, b + "rdb1.");
      r = rdb(r, b + "rdb2.");
      r = rdb(r, b + "rdb3.");
      t = r * 0.2 + t;
    }
    f = f + conv_named(t, "conv_body");
    f = lrelu(conv_named(upsample2(f), "conv_up1"));
    f = lrelu(conv_named(upsample2(f), "conv_up2"));
    return conv_named(lrelu(conv_named(f, "conv_hr")), "conv_last");
  }

  // Nearest ×2 of the tail. On the GPU ATen's kernel keeps the channels-last layout (the
  // view/expand form would come out NCHW and cost a conversion per conv).
  at::Tensor upsample2(const at::Tensor& f) const {
    if (!channels_last_) return nearest(f, 2);
    return at::upsample_nearest2d(f, std::vector<int64_t>{f.size(2) * 2, f.size(3) * 2});
  }

  RealEsrganArch arch_;
  bool channels_last_;
  std::map<std::string, at::Tensor> tensors_;
};

class RealEsrganModel;

class RealEsrganSession : public ModelSession {
 public:
  explicit RealEsrganSession(const RealEsrganModel& model) : model_(model) {}
  Planar run(Planar&& input, const RunContext& ctx) override;

 private:
  const RealEsrganModel& model_;
};

class RealEsrganModel : public Model {
 public:
  RealEsrganModel(RealEsrganWeights weights, const ModelConfig& config, const Device& device)
      : device_(device), precision_(config.precision) {
    const auto* options = dynamic_cast<const RealEsrganOptions*>(config.options.get());
    const RealEsrganArch arch = weights.arch;
    out_scale_ = options && options->scale > 0 ? options->scale : arch.scale;
    const bool cuda = device.kind == Device::Kind::kCuda;
    if (!cuda && precision_ != Precision::kFloat32) {
      throw ModelError(std::string("realesrgan: precision ") + to_string(precision_) +
                       " runs on GPUs only (use fp32 on the CPU)");
    }
#ifdef WMBATCH_WITH_CUDA
    // fp32 means fp32: cuDNN's TF32 convolutions are ~1e-3 off the reference (spec).
    if (cuda && precision_ == Precision::kFloat32) at::globalContext().setAllowTF32CuDNN(false);
#endif
    network_ = guarded("realesrgan: loading weights", [&] {
      return std::make_unique<Network>(std::move(weights), to_device(device),
                                       to_scalar_type(precision_), /*channels_last=*/cuda);
    });
    traits_.name = "realesrgan " + arch.describe();
    traits_.scale_num = out_scale_;
    traits_.scale_den = 1;
    const bool rrdb = arch.family == RealEsrganArch::Family::kRrdb;
    const int unshuffle = arch.scale == 2 ? 2 : arch.scale == 1 ? 4 : 1;
    traits_.halo_exact = !rrdb || config.exact_tiles;
    traits_.halo = traits_.halo_exact ? arch.exact_halo() : 16 * unshuffle;
    // The unshuffle's phase: exact tiles of the ×2 (×1) RRDB start on even (multiple-of-4) pixels.
    if (rrdb && config.exact_tiles) traits_.size_multiple = unshuffle;
    if (out_scale_ != arch.scale) {
      const int reach = lanczos_resize_reach(double(out_scale_) / arch.scale);
      traits_.halo += (reach + arch.scale - 1) / arch.scale;
    }
    traits_.precisions = {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16};
  }

  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device&) const override {
    return std::make_unique<RealEsrganSession>(*this);
  }

  // frames [T, 3, H, W] float32 on the host → [T, 3, H·o, W·o] float32 on the host.
  at::Tensor upscale(const at::Tensor& frames) const {
    const RealEsrganArch& arch = network_->arch();
    const int64_t h = frames.size(2), w = frames.size(3);
    at::Tensor x = frames.to(to_device(device_), to_scalar_type(precision_));
    // The unshuffle needs sizes divisible by its factor: pad right/bottom by reflection and
    // crop afterwards, as the official wrapper's mod-pad does.
    const int unshuffle = arch.family == RealEsrganArch::Family::kRrdb ? (arch.scale == 2   ? 2
                                                                          : arch.scale == 1 ? 4
                                                                                            : 1)
                                                                       : 1;
    const int64_t pad_h = (unshuffle - h % unshuffle) % unshuffle;
    const int64_t pad_w = (unshuffle - w % unshuffle) % unshuffle;
    if (pad_h || pad_w) {
      x = pad_h < h && pad_w < w ? at::reflection_pad2d(x, {0, pad_w, 0, pad_h})
                                 : at::replication_pad2d(x, {0, pad_w, 0, pad_h});
    }
    if (device_.kind == Device::Kind::kCuda) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    // On the CPU one frame at a time: RRDB's concatenated features of a 1080p frame take
    // ~1 GiB in fp32, and a batch gains nothing there. On the GPU the slice's frames go in one
    // call (fewer, larger kernels).
    at::Tensor y;
    if (device_.kind == Device::Kind::kCuda || x.size(0) == 1) {
      y = network_->forward(x);
    } else {
      std::vector<at::Tensor> outs;
      for (int64_t i = 0; i < x.size(0); ++i)
        outs.push_back(network_->forward(x.slice(0, i, i + 1)));
      y = at::cat(outs, 0);
    }
    if (pad_h || pad_w) {
      y = y.slice(2, 0, h * arch.scale).slice(3, 0, w * arch.scale);
    }
    if (out_scale_ != arch.scale) y = lanczos_resize(y, int(h * out_scale_), int(w * out_scale_));
    return y.to(at::kCPU, at::kFloat).contiguous();
  }

 private:
  Device device_;
  Precision precision_;
  int out_scale_ = 4;
  std::unique_ptr<Network> network_;
  ModelTraits traits_;
};

Planar RealEsrganSession::run(Planar&& input, const RunContext&) {
  const ModelTraits& traits = model_.traits();
  if (input.channels != 3) {
    throw ModelError(traits.name + ": input has " + std::to_string(input.channels) +
                     " channels, expected 3 (RGB)");
  }
  return guarded("realesrgan", [&] {
    c10::InferenceMode inference;
    // [1, C, T, H, W] → frames [T, C, H, W]; the network runs every frame of the slice at once.
    const at::Tensor frames = to_tensor(std::move(input))[0].permute({1, 0, 2, 3});
    const at::Tensor out = model_.upscale(frames.contiguous());
    return to_planar(out.permute({1, 0, 2, 3}));
  });
}

void synchronize(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

}  // namespace

RealEsrganBench bench_realesrgan(const RealEsrganArch& arch, const Device& device,
                                 Precision precision, int frames, int height, int width, int calls,
                                 int warmup) {
  return guarded("realesrgan bench", [&] {
    c10::InferenceMode inference;
    const bool cuda = device.kind == Device::Kind::kCuda;
#ifdef WMBATCH_WITH_CUDA
    if (cuda && precision == Precision::kFloat32) at::globalContext().setAllowTF32CuDNN(false);
#endif
    const at::ScalarType dtype = to_scalar_type(precision);
    const Network net(random_realesrgan_weights(arch, 1234), to_device(device), dtype, cuda);
    at::Tensor x = at::rand({frames, 3, height, width}, at::kFloat).to(to_device(device), dtype);
    if (cuda) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor y;
    for (int i = 0; i < warmup; ++i) y = net.forward(x);
    synchronize(device);
    reset_peak_device_memory(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) y = net.forward(x);
    synchronize(device);
    RealEsrganBench b;
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    b.fps = double(frames) * calls / b.seconds;
    b.tflops = arch.flops_per_input_pixel() * height * width * frames * calls / b.seconds / 1e12;
    b.peak_mib = peak_device_memory_mib(device);
    b.output_mean = y.to(at::kFloat).mean().item<double>();
    return b;
  });
}

std::unique_ptr<Model> make_realesrgan(const ModelConfig& config, const Device& device) {
  if (config.weights.empty()) throw ModelError("realesrgan: model.weights is required");
  return std::make_unique<RealEsrganModel>(load_realesrgan_weights(config.weights), config, device);
}

std::unique_ptr<Model> make_realesrgan_random(const RealEsrganArch& arch, const ModelConfig& config,
                                              const Device& device, uint64_t seed) {
  return std::make_unique<RealEsrganModel>(random_realesrgan_weights(arch, seed), config, device);
}

}  // namespace wm::models
