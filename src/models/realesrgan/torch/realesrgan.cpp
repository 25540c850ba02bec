// The Real-ESRGAN networks' forward passes (../shared/upscalers-spec.md) and the model/session
// around them. Weights and their layout: realesrgan_weights.cpp.
#include "src/models/realesrgan/realesrgan.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <ATen/cudnn/Handle.h>

#include "src/models/kernels/conv3x3_launch.h"
#include "src/models/kernels/cudnn_fused_conv.h"
#include "src/models/kernels/realesrgan_launch.h"
#endif

#include "src/base/error.h"
#include "src/base/fault_point.h"
#include "src/base/log_text.h"
#include "src/exec/device_context.h"
#include "src/exec/device_frames.h"
#include "src/exec/search_gate_torch.h"
#include "src/geometry.h"
#include "src/models/realesrgan/torch/realesrgan_network.h"
#include "src/models/realesrgan/torch/realesrgan_weights.h"
#include "src/models/resample/torch/lanczos_resize.h"
#include "src/models/torch/tensor.h"

namespace wm::models {

namespace {
constexpr const char* kLogger = "realesrgan";
}  // namespace

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

RealEsrganTuning RealEsrganTuning::parse(const std::string& text) {
  RealEsrganTuning t;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "conv") {
      if (value == "fused") {
        t.conv = Conv::kFused;
      } else if (value == "own") {
        t.conv = Conv::kOwn;
      } else if (value == "own-all") {
        t.conv = Conv::kOwnAll;
      } else if (value == "cudnn") {
        t.conv = Conv::kCudnn;
      } else {
        throw ModelError("realesrgan: tuning '" + item +
                         "': expected conv=fused, conv=own, conv=own-all or conv=cudnn");
      }
      continue;
    }
    if (value != "0" && value != "1") {
      throw ModelError("realesrgan: tuning '" + item + "': expected " + key + "=0 or " + key +
                       "=1");
    }
    const bool on = value == "1";
    if (key == "fused")
      t.fused = on;
    else if (key == "benchmark")
      t.benchmark = on;
    else if (key == "graph")
      t.graph = on;
    else
      throw ModelError("realesrgan: unknown tuning key '" + key +
                       "' (fused, benchmark, graph, conv)");
  }
  return t;
}

std::string RealEsrganTuning::str() const {
  return std::string("fused=") + (fused ? "1" : "0") + ",benchmark=" + (benchmark ? "1" : "0") +
         ",graph=" + (graph ? "1" : "0") + ",conv=" +
         (conv == Conv::kFused    ? "fused"
          : conv == Conv::kOwn    ? "own"
          : conv == Conv::kOwnAll ? "own-all"
                                  : "cudnn");
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
  const exec::SearchPass pass = exec::conv_search_pass(x, w, {1, 1});
  return at::conv2d(x, w, b, /*stride=*/1, /*padding=*/1);
}

at::Tensor lrelu(const at::Tensor& x) { return at::leaky_relu(x, 0.2); }

// Nearest-neighbour ×k: every pixel a k×k block.
at::Tensor nearest(const at::Tensor& x, int k) {
  const auto n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  return x.view({n, c, h, 1, w, 1}).expand({n, c, h, k, w, k}).reshape({n, c, h * k, w * k});
}

#ifdef WMBATCH_WITH_CUDA
// A contiguous channels_last [N, C, H, W] tensor (pixel-major: channel innermost).
bool pixel_major(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

bool kernel_dtype(const at::Tensor& t, cuda::EsrganDType& out) {
  if (t.scalar_type() == at::kHalf) {
    out = cuda::EsrganDType::kFloat16;
    return true;
  }
  if (t.scalar_type() == at::kBFloat16) {
    out = cuda::EsrganDType::kBFloat16;
    return true;
  }
  return false;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_launch(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw ModelError(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

// A channel range [offset, offset + channels) of a pixel-major tensor: where a fused pass reads
// or writes.
struct ChannelSlot {
  at::Tensor t;
  int64_t offset = 0;
};

// The fused pass (realesrgan_launch.h: EsrganMixArgs): v = a (+ beta·b); with c: c + gamma·v;
// leaky ReLU when slope >= 0; written to every slot. Returns false (nothing done) when the
// kernels cannot take the tensors: the caller then runs ATen.
bool fused_mix(const at::Tensor& a, const at::Tensor& b, float beta, const at::Tensor& c,
               float gamma, float slope, const std::vector<ChannelSlot>& outs,
               const at::Tensor& bias = {}, const at::Tensor& slopes = {}) {
#ifdef WMBATCH_WITH_CUDA
  cuda::EsrganDType dtype;
  if (!a.is_cuda() || !kernel_dtype(a, dtype) || !pixel_major(a)) return false;
  const int64_t channels = a.size(1);
  if (channels % 8 || outs.empty() || int(outs.size()) > cuda::EsrganMixArgs::kMaxOutputs) {
    return false;
  }
  auto fits = [&](const at::Tensor& t, int64_t offset) {
    return t.device() == a.device() && t.scalar_type() == a.scalar_type() && pixel_major(t) &&
           t.size(0) == a.size(0) && t.size(2) == a.size(2) && t.size(3) == a.size(3) &&
           t.size(1) % 8 == 0 && offset % 8 == 0 && offset + channels <= t.size(1) &&
           aligned16(t.data_ptr());
  };
  if (!aligned16(a.data_ptr())) return false;
  cuda::EsrganMixArgs args;
  args.a = a.data_ptr();
  args.a_stride = channels;
  if (b.defined()) {
    if (!fits(b, 0) || b.size(1) != channels) return false;
    args.b = b.data_ptr();
    args.b_stride = channels;
    args.beta = beta;
  }
  if (c.defined()) {
    if (!fits(c, 0) || c.size(1) != channels) return false;
    args.c = c.data_ptr();
    args.c_stride = channels;
    args.gamma = gamma;
  }
  for (const ChannelSlot& o : outs) {
    if (!fits(o.t, o.offset)) return false;
    args.out[args.outputs] = static_cast<char*>(o.t.data_ptr()) + o.offset * o.t.element_size();
    args.out_stride[args.outputs] = o.t.size(1);
    ++args.outputs;
  }
  auto per_channel = [&](const at::Tensor& v) {
    return v.device() == a.device() && v.scalar_type() == a.scalar_type() &&
           v.numel() == channels && v.is_contiguous() && aligned16(v.data_ptr());
  };
  if ((bias.defined() && !per_channel(bias)) || (slopes.defined() && !per_channel(slopes))) {
    return false;
  }
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.slopes = slopes.defined() ? slopes.data_ptr() : nullptr;
  args.slope = slope;
  args.pixels = a.size(0) * a.size(2) * a.size(3);
  args.channels = int(channels);
  const c10::cuda::CUDAGuard guard(a.device());  // the tensors' device and its current stream
  check_launch(cuda::launch_esrgan_mix(dtype, args, at::cuda::getCurrentCUDAStream()),
               "realesrgan mix kernel");
  return true;
#else
  (void)a, (void)b, (void)beta, (void)c, (void)gamma, (void)slope, (void)outs, (void)bias;
  (void)slopes;
  return false;
#endif
}

// SRVGG's tail in one pass (EsrganShuffleAddArgs); an undefined tensor when the kernel cannot
// take the tensors.
at::Tensor fused_shuffle_add(const at::Tensor& t, const at::Tensor& x, int scale, bool out_float) {
#ifdef WMBATCH_WITH_CUDA
  cuda::EsrganDType dtype;
  if (!t.is_cuda() || !kernel_dtype(t, dtype) || !pixel_major(t) || !aligned16(t.data_ptr()) ||
      x.device() != t.device() || x.scalar_type() != t.scalar_type() || x.dim() != 4 ||
      x.size(1) != 3 || t.size(1) != 3 * scale * scale || x.size(0) != t.size(0) ||
      x.size(2) != t.size(2) || x.size(3) != t.size(3)) {
    return {};
  }
  const int64_t n = t.size(0), h = t.size(2), w = t.size(3);
  at::Tensor out = at::empty({n, 3, h * scale, w * scale},
                             t.options().dtype(out_float ? at::kFloat : t.scalar_type()));
  cuda::EsrganShuffleAddArgs args;
  args.t = t.data_ptr();
  args.x = x.data_ptr();
  for (int d = 0; d < 4; ++d) args.x_strides[d] = x.stride(d);
  args.out = out.data_ptr();
  args.out_float = out_float;
  args.frames = int(n);
  args.height = int(h);
  args.width = int(w);
  args.scale = scale;
  const c10::cuda::CUDAGuard guard(t.device());  // the tensors' device and its current stream
  check_launch(cuda::launch_esrgan_shuffle_add(dtype, args, at::cuda::getCurrentCUDAStream()),
               "realesrgan shuffle kernel");
  return out;
#else
  (void)t, (void)x, (void)scale, (void)out_float;
  return {};
#endif
}

// Nearest ×2 of a pixel-major half-type tensor in one pass (EsrganNearest2Args), channels_last
// out; an undefined tensor when the kernel cannot take it.
at::Tensor fused_nearest2(const at::Tensor& f) {
#ifdef WMBATCH_WITH_CUDA
  cuda::EsrganDType dtype;
  if (!f.is_cuda() || !kernel_dtype(f, dtype) || !pixel_major(f) || f.size(1) % 8 ||
      !aligned16(f.data_ptr())) {
    return {};
  }
  const int64_t n = f.size(0), c = f.size(1), h = f.size(2), w = f.size(3);
  at::Tensor out =
      at::empty({n, c, 2 * h, 2 * w}, f.options().memory_format(at::MemoryFormat::ChannelsLast));
  cuda::EsrganNearest2Args args;
  args.in = f.data_ptr();
  args.out = out.data_ptr();
  args.frames = int(n);
  args.height = int(h);
  args.width = int(w);
  args.channels = int(c);
  const c10::cuda::CUDAGuard guard(f.device());
  check_launch(cuda::launch_esrgan_nearest2(dtype, args, at::cuda::getCurrentCUDAStream()),
               "realesrgan nearest kernel");
  return out;
#else
  (void)f;
  return {};
#endif
}

// The activation of own_conv's epilogue.
enum class ConvAct { kNone, kPRelu, kLeaky };

// A 3×3 convolution with its epilogue (conv3x3_launch.h: Conv3x3Args) of the first `cin`
// channels of the pixel-major `in` with `weight` [Cout, cin, 3, 3] (channels_last) and `bias`,
// then `act` (PReLU with `prelu`'s per-channel slopes, leaky ReLU 0.2), then for each of
// `residuals` (at most two, in order) y ← r + alpha·y (alpha 0.2 unless `alphas` says); written
// to every slot; float32 math, one rounding at the store. Fills `args` and `dtype`; false when the
// tensors' layout does not fit (then the caller runs ATen).
#ifdef WMBATCH_WITH_CUDA
bool conv_args(const at::Tensor& in, int64_t cin, const at::Tensor& weight, const at::Tensor& bias,
               ConvAct act, const at::Tensor& prelu, const std::vector<ChannelSlot>& outs,
               const std::vector<ChannelSlot>& residuals, const std::vector<float>& alphas,
               cuda::Conv3x3Args& args, cuda::EsrganDType& dtype) {
  if (!in.is_cuda() || !kernel_dtype(in, dtype) || !pixel_major(in) || in.size(1) % 8 ||
      cin > in.size(1) || !aligned16(in.data_ptr())) {
    return false;
  }
  if (!weight.defined() || weight.dim() != 4 || weight.device() != in.device() ||
      weight.scalar_type() != in.scalar_type() || weight.size(1) != cin || weight.size(2) != 3 ||
      weight.size(3) != 3 || !weight.is_contiguous(at::MemoryFormat::ChannelsLast) ||
      !aligned16(weight.data_ptr())) {
    return false;
  }
  const int64_t cout = weight.size(0);
  if (cin > 4096 || cout > 4096 || cout % 8) return false;
  auto per_channel = [&](const at::Tensor& v) {
    return v.defined() && v.device() == in.device() && v.scalar_type() == in.scalar_type() &&
           v.numel() == cout && v.is_contiguous();
  };
  if (bias.defined() && !per_channel(bias)) return false;
  if (act == ConvAct::kPRelu && !per_channel(prelu)) return false;
  if (outs.empty() || int(outs.size()) > cuda::Conv3x3Args::kMaxOutputs) return false;
  if (in.size(0) * in.size(2) * in.size(3) == 0 || residuals.size() > 2) return false;
  auto fits = [&](const ChannelSlot& o) {
    const at::Tensor& t = o.t;
    return t.device() == in.device() && t.scalar_type() == in.scalar_type() && pixel_major(t) &&
           t.size(0) == in.size(0) && t.size(2) == in.size(2) && t.size(3) == in.size(3) &&
           t.size(1) % 8 == 0 && o.offset >= 0 && o.offset % 8 == 0 &&
           o.offset + cout <= t.size(1) && aligned16(t.data_ptr());
  };
  args = cuda::Conv3x3Args();
  for (size_t r = 0; r < residuals.size(); ++r) {
    const ChannelSlot& o = residuals[r];
    if (!fits(o)) return false;
    const void* p = static_cast<const char*>(o.t.data_ptr()) + o.offset * o.t.element_size();
    const float alpha = r < alphas.size() ? alphas[r] : 0.2f;
    if (r == 0) {
      args.residual1 = p;
      args.residual1_stride = o.t.size(1);
      args.alpha1 = alpha;
    } else {
      args.residual2 = p;
      args.residual2_stride = o.t.size(1);
      args.alpha2 = alpha;
    }
  }
  for (const ChannelSlot& o : outs) {
    const at::Tensor& t = o.t;
    if (!fits(o)) return false;
    if (t.is_alias_of(in) && (t.data_ptr() != in.data_ptr() || o.offset < cin)) return false;
    args.out[args.outputs] = static_cast<char*>(t.data_ptr()) + o.offset * t.element_size();
    args.out_stride[args.outputs] = t.size(1);
    ++args.outputs;
  }
  args.input = in.data_ptr();
  args.input_stride = in.size(1);
  args.in_channels = int(cin);
  args.weight = weight.data_ptr();
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.out_channels = int(cout);
  args.activation = act == ConvAct::kPRelu   ? cuda::Conv3x3Args::kPRelu
                    : act == ConvAct::kLeaky ? cuda::Conv3x3Args::kLeaky
                                             : cuda::Conv3x3Args::kNone;
  args.prelu = act == ConvAct::kPRelu ? prelu.data_ptr() : nullptr;
  args.leaky_slope = 0.2f;
  args.frames = int(in.size(0));
  args.height = int(in.size(2));
  args.width = int(in.size(3));
  return true;
}
#endif

// conv_args' convolution on our kernel (conv3x3_launch.h). A slot in `in` itself must start at
// or after channel `cin` (the kernel reads neighbouring pixels other blocks may already have
// written); a residual may be read from `in` or be a slot itself. Returns false (nothing done)
// when the kernel cannot take the tensors: the caller then runs ATen.
bool own_conv(const at::Tensor& in, int64_t cin, const at::Tensor& weight, const at::Tensor& bias,
              ConvAct act, const at::Tensor& prelu, const std::vector<ChannelSlot>& outs,
              const std::vector<ChannelSlot>& residuals = {},
              const std::vector<float>& alphas = {}) {
#ifdef WMBATCH_WITH_CUDA
  cuda::Conv3x3Args args;
  cuda::EsrganDType dtype;
  if (!conv_args(in, cin, weight, bias, act, prelu, outs, residuals, alphas, args, dtype) ||
      !cuda::conv3x3_supported(args.in_channels, args.out_channels)) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(in.device());  // the tensors' device and its current stream
  check_launch(cuda::launch_conv3x3(dtype, args, at::cuda::getCurrentCUDAStream()),
               "realesrgan convolution kernel");
  return true;
#else
  (void)in, (void)cin, (void)weight, (void)bias, (void)act, (void)prelu, (void)outs;
  (void)residuals, (void)alphas;
  return false;
#endif
}

// conv_args' convolution through cuDNN's graph API with the epilogue fused (cudnn_fused_conv.h):
// at most two slots, none sharing memory with `in` or a residual. `prelu_in_unit`: every slope
// is in [0, 1]. Returns false (nothing done) when cuDNN has no engine for it or the tensors do
// not fit: the caller then runs our kernel or ATen.
bool cudnn_conv(const at::Tensor& in, int64_t cin, const at::Tensor& weight, const at::Tensor& bias,
                ConvAct act, const at::Tensor& prelu, bool prelu_in_unit,
                const std::vector<ChannelSlot>& outs,
                const std::vector<ChannelSlot>& residuals = {},
                const std::vector<float>& alphas = {}) {
#ifdef WMBATCH_WITH_CUDA
  if (outs.size() > 2) return false;
  for (const ChannelSlot& o : outs) {
    if (o.t.is_alias_of(in)) return false;
    for (const ChannelSlot& r : residuals) {
      if (o.t.is_alias_of(r.t)) return false;
    }
  }
  cuda::Conv3x3Args args;
  cuda::EsrganDType dtype;
  if (!conv_args(in, cin, weight, bias, act, prelu, outs, residuals, alphas, args, dtype)) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(in.device());  // the tensors' device and its current stream
  // Scratch from the caching allocator, kept per thread and grown when a plan needs more; the
  // stream-ordered allocator makes reuse on this stream safe.
  thread_local at::Tensor scratch;
  const auto workspace = [&](size_t bytes) -> void* {
    if (bytes == 0) return nullptr;
    if (!scratch.defined() || scratch.device() != in.device() || size_t(scratch.numel()) < bytes) {
      scratch = at::empty({int64_t(bytes)}, in.options().dtype(at::kByte));
    }
    return scratch.data_ptr();
  };
  // The first launch of a shape on this thread times cuDNN's plans: alone on the device.
  uint64_t shape = 0;
  for (int64_t v : {int64_t(dtype), int64_t(args.frames), int64_t(args.height), int64_t(args.width),
                    int64_t(args.in_channels), args.input_stride, int64_t(args.out_channels),
                    int64_t(args.activation), int64_t(args.outputs),
                    int64_t(args.residual1 != nullptr), int64_t(args.residual2 != nullptr)}) {
    shape = exec::shape_hash(shape, uint64_t(v));
  }
  const exec::SearchPass pass = exec::search_gate(in.get_device(), shape);
  const cudaError_t e =
      cuda::launch_conv3x3_cudnn(at::native::getCudnnHandle(), dtype, args, prelu_in_unit,
                                 at::cuda::getCurrentCUDAStream(), workspace);
  if (e == cudaErrorNotSupported) return false;
  check_launch(e, "realesrgan cuDNN fused convolution");
  return true;
#else
  (void)in, (void)cin, (void)weight, (void)bias, (void)act, (void)prelu, (void)prelu_in_unit;
  (void)outs, (void)residuals, (void)alphas;
  return false;
#endif
}

// Whether own_conv takes these channel counts (layouts aside).
bool own_conv_takes(int64_t cin, int64_t cout) {
#ifdef WMBATCH_WITH_CUDA
  return cin <= 4096 && cout <= 4096 && cuda::conv3x3_supported(int(cin), int(cout));
#else
  (void)cin, (void)cout;
  return false;
#endif
}

// The dense block's residual on the first F channels of the pixel-major dense-block buffer
// `buf` (the block's input x): x ← x + 0.2·x5; with `t` (the RRDB's last block):
// t ← t + 0.2·(x + 0.2·x5), written to x's channels and to t. One fused pass (EsrganMixArgs);
// every element is read and written by the same thread, so x and t are updated in place.
// Returns false (nothing done) when the kernel cannot take the tensors.
bool residual_in_place(const at::Tensor& buf, const at::Tensor& x5, const at::Tensor& t) {
#ifdef WMBATCH_WITH_CUDA
  cuda::EsrganDType dtype;
  if (!buf.is_cuda() || !kernel_dtype(buf, dtype) || !pixel_major(buf) || buf.size(1) % 8 ||
      !aligned16(buf.data_ptr())) {
    return false;
  }
  const int64_t channels = x5.size(1);
  auto fits = [&](const at::Tensor& v) {
    return v.device() == buf.device() && v.scalar_type() == buf.scalar_type() && pixel_major(v) &&
           v.size(0) == buf.size(0) && v.size(1) == channels && v.size(2) == buf.size(2) &&
           v.size(3) == buf.size(3) && aligned16(v.data_ptr());
  };
  if (channels % 8 || channels > buf.size(1) || !fits(x5) || (t.defined() && !fits(t))) {
    return false;
  }
  cuda::EsrganMixArgs args;
  args.a = buf.data_ptr();
  args.a_stride = buf.size(1);
  args.b = x5.data_ptr();
  args.b_stride = channels;
  args.beta = 0.2f;
  args.out[0] = buf.data_ptr();
  args.out_stride[0] = buf.size(1);
  args.outputs = 1;
  if (t.defined()) {
    args.c = t.data_ptr();
    args.c_stride = channels;
    args.gamma = 0.2f;
    args.out[1] = t.data_ptr();
    args.out_stride[1] = channels;
    args.outputs = 2;
  }
  args.pixels = buf.size(0) * buf.size(2) * buf.size(3);
  args.channels = int(channels);
  const c10::cuda::CUDAGuard guard(buf.device());  // the tensors' device and its current stream
  check_launch(cuda::launch_esrgan_mix(dtype, args, at::cuda::getCurrentCUDAStream()),
               "realesrgan mix kernel");
  return true;
#else
  (void)buf, (void)x5, (void)t;
  return false;
#endif
}

// The weights of one network on its device, in its dtype and memory format.
class Network final : public RealEsrganNetwork {
 public:
  Network(RealEsrganWeights weights, at::Device device, at::ScalarType dtype, bool channels_last,
          const RealEsrganTuning& tuning = {})
      : arch_(weights.arch), channels_last_(channels_last), tuning_(tuning) {
    for (auto& [name, t] : weights.tensors) {
      at::Tensor w = t.to(device, dtype);
      if (channels_last && w.dim() == 4) w = w.contiguous(at::MemoryFormat::ChannelsLast);
      tensors_[name] = w;
    }
    // The fused kernels take half types in channels_last (GPU runs); fp32 stays on ATen so it
    // matches the golden vectors op for op.
    fused_ = tuning.fused && device.is_cuda() && channels_last &&
             (dtype == at::kHalf || dtype == at::kBFloat16) && arch_.features % 8 == 0 &&
             arch_.growth % 8 == 0;
    own_conv_ = fused_ && tuning.conv != RealEsrganTuning::Conv::kCudnn;
    own_conv5_ = own_conv_ && tuning.conv == RealEsrganTuning::Conv::kOwnAll;
    cudnn_fused_ = fused_ && tuning.conv == RealEsrganTuning::Conv::kFused;
    if (cudnn_fused_ && arch_.family == RealEsrganArch::Family::kSrvgg) {
      // PReLU is one cuDNN operation less as max(y, a·y), which holds for slopes in [0, 1].
      for (int i = 0; i <= arch_.convs; ++i) {
        const at::Tensor& a = w("body." + std::to_string(2 * i + 1) + ".weight");
        prelu_in_unit_.push_back(a.min().item<float>() >= 0.f && a.max().item<float>() <= 1.f);
      }
      // The first convolution (3 input channels) stays on ATen's (cuDNN 9.19's graph has no
      // engine for it, not even on the input padded to 8 channels: measured on an H200,
      // 2026-11-30), without its bias; the bias and PReLU follow in one pass (fused_mix).
    }
  }
  const RealEsrganArch& arch() const override { return arch_; }

  // x [N, 3, H, W] → [N, 3, H·s, W·s] (raw values); float32 when `out_float`, else x's dtype.
  at::Tensor forward(const at::Tensor& x, bool out_float = false) const override {
    at::Tensor y = arch_.family == RealEsrganArch::Family::kSrvgg ? srvgg(x, out_float) : rrdb(x);
    return out_float ? y.to(at::kFloat) : y;
  }

 private:
  const at::Tensor& w(const std::string& name) const { return tensors_.at(name); }
  at::Tensor conv_named(const at::Tensor& x, const std::string& name) const {
    return conv(x, w(name + ".weight"), w(name + ".bias"));
  }
  // Layer `name` with `act` (and y ← residual + alpha·y) through cuDNN's fused graph, into a new
  // channels_last tensor; undefined when that path is off or cannot take it (the caller then runs
  // ATen: conv_named and the activation).
  at::Tensor conv_fused(const at::Tensor& x, const std::string& name, ConvAct act,
                        const at::Tensor& residual = {}, float alpha = 1.f) const {
    if (!cudnn_fused_) return {};
    const at::Tensor& weight = w(name + ".weight");
    const at::Tensor in = x.contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor y = at::empty({in.size(0), weight.size(0), in.size(2), in.size(3)},
                                   in.options().memory_format(at::MemoryFormat::ChannelsLast));
    std::vector<ChannelSlot> residuals;
    if (residual.defined())
      residuals.push_back({residual.contiguous(at::MemoryFormat::ChannelsLast), 0});
    if (!cudnn_conv(in, in.size(1), weight, w(name + ".bias"), act, {}, false, {{y, 0}}, residuals,
                    {alpha})) {
      return {};
    }
    return y;
  }

  at::Tensor srvgg(const at::Tensor& x, bool out_float) const {
    at::Tensor t = x;
    for (int i = 0; i <= arch_.convs; ++i) {
      const std::string name = "body." + std::to_string(2 * i);
      const at::Tensor& slopes = w("body." + std::to_string(2 * i + 1) + ".weight");
      if (i == 0 && fused_) {
        const at::Tensor y =
            conv(x.contiguous(at::MemoryFormat::ChannelsLast), w(name + ".weight"), {})
                .contiguous(at::MemoryFormat::ChannelsLast);
        if (fused_mix(y, {}, 0.f, {}, 0.f, -1.f, {{y, 0}}, w(name + ".bias"), slopes)) {
          t = y;
          continue;
        }
        t = at::prelu(y + w(name + ".bias").view({1, -1, 1, 1}), slopes);
        continue;
      }
      if (own_conv_ && i > 0) {  // the body's F→F convolutions, PReLU in the epilogue
        t = t.contiguous(at::MemoryFormat::ChannelsLast);  // (a no-op where it already is)
        const at::Tensor& weight = w(name + ".weight");
        const at::Tensor y = at::empty({t.size(0), weight.size(0), t.size(2), t.size(3)},
                                       t.options().memory_format(at::MemoryFormat::ChannelsLast));
        if ((cudnn_fused_ && cudnn_conv(t, t.size(1), weight, w(name + ".bias"), ConvAct::kPRelu,
                                        slopes, prelu_in_unit_[size_t(i)], {{y, 0}})) ||
            own_conv(t, t.size(1), weight, w(name + ".bias"), ConvAct::kPRelu, slopes, {{y, 0}})) {
          t = y;
          continue;
        }
      }
      t = conv_named(t, name);
      t = at::prelu(t, slopes);
    }
    const std::string last = "body." + std::to_string(2 * arch_.convs + 2);
    at::Tensor y = conv_fused(t, last, ConvAct::kNone);  // the bias in the epilogue
    t = y.defined() ? y : conv_named(t, last);
    if (fused_) {
      at::Tensor y = fused_shuffle_add(t, x, arch_.scale, out_float);
      if (y.defined()) return y;
    }
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

  // The RRDB trunk with preallocated dense-block buffers instead of torch.cat: buffer k holds
  // the block input and the first k+1 activations ([F + (k+1)·G] channels), each activation is
  // written by one fused pass (bias is in the conv, leaky ReLU in the pass) into every buffer
  // that holds it, and each residual sum is one pass that writes the next block's input into
  // all of them. Same math as rdb() (one rounding per stored value). Returns undefined when the
  // kernels cannot take the tensors (then nothing was changed).
  at::Tensor trunk_fused(const at::Tensor& f) const {
    const int64_t n = f.size(0), h = f.size(2), wd = f.size(3);
    const int64_t F = arch_.features, G = arch_.growth;
    const auto options = f.options().memory_format(at::MemoryFormat::ChannelsLast);
    at::Tensor buf[4];
    for (int k = 0; k < 4; ++k) buf[k] = at::empty({n, F + (k + 1) * G, h, wd}, options);
    const at::Tensor x = at::empty({n, F, h, wd}, options);  // the dense block's input
    const at::Tensor t = at::empty({n, F, h, wd}, options);  // the RRDB's input
    const std::vector<ChannelSlot> inputs = {{x, 0},      {buf[0], 0}, {buf[1], 0},
                                             {buf[2], 0}, {buf[3], 0}, {t, 0}};
    if (!fused_mix(f, {}, 0, {}, 0, -1, inputs)) return {};
    const std::vector<ChannelSlot> block_inputs(inputs.begin(), inputs.end() - 1);
    for (int i = 0; i < arch_.blocks; ++i) {
      const std::string b = "body." + std::to_string(i) + ".";
      for (int r = 1; r <= 3; ++r) {
        const std::string p = b + "rdb" + std::to_string(r) + ".";
        for (int k = 0; k < 4; ++k) {
          const at::Tensor y =
              conv_named(k == 0 ? x : buf[k - 1], p + "conv" + std::to_string(k + 1));
          std::vector<ChannelSlot> slots;
          for (int j = k; j < 4; ++j) slots.push_back({buf[j], F + k * G});
          if (!fused_mix(y, {}, 0, {}, 0, 0.2f, slots))
            throw ModelError("realesrgan: fused pass refused");
        }
        const at::Tensor x5 = conv_named(buf[3], p + "conv5");
        // x ← x + 0.2·x5; the RRDB's last one: t ← t + 0.2·(x + 0.2·x5), also the next input.
        const bool last = r == 3;
        if (!fused_mix(x, x5, 0.2f, last ? t : at::Tensor(), 0.2f, -1,
                       last ? inputs : block_inputs)) {
          throw ModelError("realesrgan: fused pass refused");
        }
      }
    }
    return t;
  }

  // The RRDB trunk on our convolution kernel: a dense-block buffer of F + 4G channels whose
  // first F hold the block input x; convolution k (1..4) reads its first F + (k-1)·G channels and
  // writes its leaky-ReLU activation (bias and activation in its epilogue) right after them, so
  // there is no concatenation and no separate pass. conv5 (F + 4G → F) goes through cuDNN and
  // one pass updates x (and t) in place; with `conv=own-all` it is our kernel too, its epilogue
  // the residual sums (x + 0.2·x5; the RRDB's last block t + 0.2·(x + 0.2·x5), also written to
  // t), written into the other of two buffers (it cannot write the x it reads: neighbouring
  // blocks still read it). Same math as rdb() (our epilogue rounds once where ATen rounds x5
  // first). Returns undefined when the kernels cannot take the tensors (then nothing was
  // changed).
  at::Tensor trunk_own(const at::Tensor& f) const {
    const int64_t n = f.size(0), h = f.size(2), wd = f.size(3);
    const int64_t F = arch_.features, G = arch_.growth;
    for (int k = 0; k < 4; ++k) {
      if (!own_conv_takes(F + k * G, G)) return {};
    }
    const bool own5 = own_conv5_ && own_conv_takes(F + 4 * G, F);
    // conv=fused: conv5 on cuDNN's fused graph, which writes the other buffer (and the other t:
    // it cannot write what it reads), ping-pong like own5.
    const bool cudnn5 = cudnn_fused_;
    const auto options = f.options().memory_format(at::MemoryFormat::ChannelsLast);
    at::Tensor bufs[2], ts[2];
    bufs[0] = at::empty({n, F + 4 * G, h, wd}, options);
    if (own5 || cudnn5) bufs[1] = at::empty({n, F + 4 * G, h, wd}, options);
    ts[0] = at::empty({n, F, h, wd}, options);
    if (cudnn5) ts[1] = at::empty({n, F, h, wd}, options);
    int cur = 0, tc = 0;
    bool first = true;
    for (int i = 0; i < arch_.blocks; ++i) {
      const std::string b = "body." + std::to_string(i) + ".";
      for (int r = 1; r <= 3; ++r) {
        const std::string p = b + "rdb" + std::to_string(r) + ".";
        const at::Tensor& buf = bufs[cur];
        const at::Tensor& t = ts[tc];
        for (int k = 0; k < 4; ++k) {
          const std::string name = p + "conv" + std::to_string(k + 1);
          if (first && !fused_mix(f, {}, 0, {}, 0, -1, {{buf, 0}, {t, 0}})) return {};
          if (!own_conv(buf, F + k * G, w(name + ".weight"), w(name + ".bias"), ConvAct::kLeaky, {},
                        {{buf, F + k * G}})) {
            if (first) return {};  // nothing that counts was written yet
            throw ModelError("realesrgan: own convolution refused");
          }
          first = false;
        }
        const bool last = r == 3;
        const std::string name = p + "conv5";
        if (cudnn5) {
          std::vector<ChannelSlot> outs = {{bufs[1 - cur], 0}};
          std::vector<ChannelSlot> residuals = {{buf, 0}};
          if (last) {
            outs.push_back({ts[1 - tc], 0});
            residuals.push_back({t, 0});
          }
          if (cudnn_conv(buf, F + 4 * G, w(name + ".weight"), w(name + ".bias"), ConvAct::kNone, {},
                         false, outs, residuals)) {
            cur = 1 - cur;
            if (last) tc = 1 - tc;
            continue;
          }
        }
        if (own5) {
          const at::Tensor& next = bufs[1 - cur];
          std::vector<ChannelSlot> outs = {{next, 0}};
          std::vector<ChannelSlot> residuals = {{buf, 0}};
          if (last) {
            outs.push_back({t, 0});
            residuals.push_back({t, 0});
          }
          if (!own_conv(buf, F + 4 * G, w(name + ".weight"), w(name + ".bias"), ConvAct::kNone, {},
                        outs, residuals)) {
            throw ModelError("realesrgan: own convolution refused");
          }
          cur = 1 - cur;
        } else {
          const at::Tensor x5 = conv_named(buf, name).contiguous(at::MemoryFormat::ChannelsLast);
          if (!residual_in_place(buf, x5, last ? t : at::Tensor())) {
            throw ModelError("realesrgan: fused pass refused");
          }
        }
      }
    }
    if (first) return {};
    return ts[tc];
  }

  at::Tensor rrdb(const at::Tensor& x) const {
    at::Tensor f = x;
    const int unshuffle = arch_.scale == 2 ? 2 : arch_.scale == 1 ? 4 : 1;
    if (unshuffle > 1) f = at::pixel_unshuffle(x, unshuffle);
    if (channels_last_) f = f.contiguous(at::MemoryFormat::ChannelsLast);
    f = conv_named(f, "conv_first");
    at::Tensor t = own_conv_ ? trunk_own(f) : at::Tensor();
    if (!t.defined() && fused_) t = trunk_fused(f);
    if (!t.defined()) {
      t = f;
      for (int i = 0; i < arch_.blocks; ++i) {
        const std::string b = "body." + std::to_string(i) + ".";
        at::Tensor r = rdb(t, b + "rdb1.");
        r = rdb(r, b + "rdb2.");
        r = rdb(r, b + "rdb3.");
        t = r * 0.2 + t;
      }
    }
    // The tail: on cuDNN's fused graph where it takes it (bias, leaky ReLU and the residual in
    // the epilogue), else ATen.
    at::Tensor g = conv_fused(t, "conv_body", ConvAct::kNone, f, 1.f);  // f + conv_body(t)
    f = g.defined() ? g : f + conv_named(t, "conv_body");
    for (const char* up : {"conv_up1", "conv_up2"}) {
      const at::Tensor u = upsample2(f);
      g = conv_fused(u, up, ConvAct::kLeaky);
      f = g.defined() ? g : lrelu(conv_named(u, up));
    }
    g = conv_fused(f, "conv_hr", ConvAct::kLeaky);
    f = g.defined() ? g : lrelu(conv_named(f, "conv_hr"));
    return conv_named(f, "conv_last");
  }

  // Nearest ×2 of the tail, channels-last on the GPU (the view/expand form would come out NCHW
  // and cost a conversion per conv): our kernel for half types, else ATen's.
  at::Tensor upsample2(const at::Tensor& f) const {
    if (!channels_last_) return nearest(f, 2);
    if (fused_) {
      const at::Tensor y = fused_nearest2(f);
      if (y.defined()) return y;
    }
    return at::upsample_nearest2d(f, std::vector<int64_t>{f.size(2) * 2, f.size(3) * 2});
  }

  RealEsrganArch arch_;
  bool channels_last_;
  RealEsrganTuning tuning_;
  bool fused_ = false;
  bool own_conv_ = false;
  bool own_conv5_ = false;           // RRDB's conv5 on our kernel too
  bool cudnn_fused_ = false;         // 64-channel convolutions on cuDNN's fused graph (conv=fused)
  std::vector<bool> prelu_in_unit_;  // SRVGG: layer i's PReLU slopes all in [0, 1]
  std::map<std::string, at::Tensor> tensors_;
};

class RealEsrganModel;

class RealEsrganSession : public ModelSession {
 public:
  explicit RealEsrganSession(const RealEsrganModel& model) : model_(model) {}
  Planar run(Planar&& input, const RunContext& ctx) override;

 private:
#ifdef WMBATCH_WITH_CUDA
  Planar run_cuda(Planar&& input, const RunContext& ctx);
#endif
  const RealEsrganModel& model_;
};

class RealEsrganModel : public Model, public exec::DeviceFrameModel {
 public:
  RealEsrganModel(RealEsrganWeights weights, const ModelConfig& config, const Device& device)
      : device_(device), precision_(config.precision) {
    auto_tiles_ = config.auto_tiles;
    pinned_pool_bytes_ = config.pinned_pool_bytes;
    const RealEsrganTuning tuning = RealEsrganTuning::parse(config.tuning);
    const auto* options = dynamic_cast<const RealEsrganOptions*>(config.options.get());
    const RealEsrganArch arch = weights.arch;
    out_scale_ = options && options->scale > 0 ? options->scale : arch.scale;
    const bool cuda = device.kind == Device::Kind::kCuda;
    if (!cuda && precision_ != Precision::kFloat32) {
      throw ModelError(std::string("realesrgan: precision ") + to_string(precision_) +
                       " runs on GPUs only (use fp32 on the CPU)");
    }
    if (cuda) {
      // fp32 means fp32: cuDNN's TF32 convolutions are ~1e-3 off the reference (spec). Tiles and
      // the last slice bring a few new shapes; each is searched once.
      exec::DeviceSettings settings;
      settings.exact_float32_convs = precision_ == Precision::kFloat32;
      if (tuning.benchmark) settings.cudnn_benchmark = 1;
      exec::device_layer().ask(settings);
    }
    network_ = guarded("realesrgan: loading weights", [&] {
      return std::make_unique<Network>(std::move(weights), to_device(device),
                                       to_scalar_type(precision_), /*channels_last=*/cuda, tuning);
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
    traits_.device_frames = true;
  }

  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device&) const override {
    return std::make_unique<RealEsrganSession>(*this);
  }

  // frames [T, 3, H, W] float32 on the host → [T, 3, H·o, W·o] float32 on the host. With
  // `tiling: auto`, frames per call and tiles come from `cap` bytes (DeviceContext::
  // device_memory_cap; 0 on the CPU: no limit), and a call that runs out of device memory is
  // retried with fewer frames, then smaller tiles (see upscale_auto).
  at::Tensor upscale(const at::Tensor& frames, int64_t cap) const {
    if (!auto_tiles_) return upscale_whole(frames);
    return upscale_auto(frames, cap);
  }

 private:
  // Device bytes one call needs per input pixel (of all its frames), estimated on the large
  // side: RRDB's dense-block buffers and its tail at 4× and 16× the pixels, SRVGG's two live
  // 64-channel activations and its output; float32 outputs on the device and for the copy out.
  int64_t bytes_per_input_pixel() const {
    const RealEsrganArch& arch = network_->arch();
    const int64_t e = precision_ == Precision::kFloat32 ? 4 : 2;
    const int64_t s = arch.scale, out = int64_t(3) * out_scale_ * out_scale_ * 4 * 2;
    if (arch.family == RealEsrganArch::Family::kSrvgg) {
      return e * (3 * arch.features + 3 * s * s) + out;
    }
    const int64_t u = arch.scale == 2 ? 2 : arch.scale == 1 ? 4 : 1;
    const int64_t trunk = 3 * arch.features + 4 * arch.features + 10 * arch.growth;
    return e * (trunk + 3 * arch.features * 16) / (u * u) + out;
  }

  // What a call may use on the device: the cap (the device layer's: the budget, else what the
  // allocator holds unused plus what the device has free) less what is allocated, a tenth and
  // cuDNN's workspaces. 0 when unknown (the CPU: no limit).
  int64_t available_bytes(int64_t cap) const {
#ifdef WMBATCH_WITH_CUDA
    if (device_.kind == Device::Kind::kCuda) {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index);
      const int64_t allocated = stats.allocated_bytes[0].current;
      return std::max<int64_t>(cap - allocated - cap / 10 - (int64_t(512) << 20), 1);
    }
#endif
    return cap;
  }

  at::Tensor upscale_auto(const at::Tensor& frames, int64_t cap) const {
    const int64_t t_all = frames.size(0), h = frames.size(2), w = frames.size(3);
    const int64_t avail = available_bytes(cap);
    const int64_t per_frame = bytes_per_input_pixel() * h * w;
    int64_t per_call = t_all;
    int tile = 0;  // input pixels per tile side; 0: whole frames
    if (avail > 0) {
      per_call = std::clamp<int64_t>(avail / std::max<int64_t>(per_frame, 1), 1, t_all);
      if (avail < per_frame) {
        const double side = std::sqrt(double(avail) / double(bytes_per_input_pixel()));
        tile = std::max(kMinAutoTile, int(side) / 16 * 16);
      }
    }
    at::Tensor out = at::empty({t_all, 3, h * out_scale_, w * out_scale_}, at::kFloat);
    for (int64_t f0 = 0; f0 < t_all;) {
      const int64_t n = std::min(per_call, t_all - f0);
      try {
        // A chunk's output goes into `out` only once the whole chunk is done: a retry redoes
        // exactly that chunk, so no frame is lost or written twice.
        out.narrow(0, f0, n).copy_(upscale_tiled(frames.narrow(0, f0, n), tile));
        f0 += n;
      } catch (const c10::OutOfMemoryError&) {
#ifdef WMBATCH_WITH_CUDA
        if (device_.kind == Device::Kind::kCuda) {
          c10::cuda::device_synchronize();
          c10::cuda::CUDACachingAllocator::emptyCache();
        }
#endif
        const int longest = int(std::max(h, w));
        if (n > 1) {
          per_call = (n + 1) / 2;
        } else if (tile == 0 || tile > kMinAutoTile) {
          const int from = tile == 0 ? longest : tile;
          tile = std::max(kMinAutoTile, (from / 2 + 15) / 16 * 16);
          if (tile >= longest && from == longest) tile = std::max(kMinAutoTile, longest / 2);
        } else {
          throw;
        }
        log::warn(kLogger, traits_.name + ": out of device memory; retrying frames " +
                               std::to_string(f0) + ".. with " + std::to_string(per_call) +
                               " frame(s) per call" +
                               (tile ? ", tiles of " + std::to_string(tile) + " px" : ""));
      }
    }
    return out;
  }

  // `frames` cut into tiles of `tile` input pixels (0: whole frames), each grown by the halo,
  // run and blended (weights 0/1 for an exact halo, feathered over the overlap otherwise).
  at::Tensor upscale_tiled(const at::Tensor& frames, int tile) const {
    const int64_t h = frames.size(2), w = frames.size(3);
    if (tile <= 0 || (tile >= h && tile >= w)) return upscale_whole(frames);
    const int overlap = traits_.halo_exact ? 0 : std::min(traits_.halo, tile / 2);
    TilePlan plan;
    try {
      plan = plan_tiles(int(w), int(h), std::min<int>(tile, int(w)), std::min<int>(tile, int(h)),
                        overlap, traits_.halo, out_scale_, 1, traits_.size_multiple,
                        /*feather=*/!traits_.halo_exact);
    } catch (const std::invalid_argument& e) {
      throw ModelError(traits_.name + ": automatic tiles: " + e.what());
    }
    at::Tensor out = at::zeros({frames.size(0), 3, h * out_scale_, w * out_scale_}, at::kFloat);
    for (int i = 0; i < plan.tiles(); ++i) {
      const TileRect r = plan.tile(i);
      const at::Tensor y = upscale_whole(frames.narrow(2, r.y_window.begin, r.y_window.size())
                                             .narrow(3, r.x_window.begin, r.x_window.size())
                                             .contiguous());
      const int64_t top = int64_t(r.y_region.begin - r.y_window.begin) * out_scale_;
      const int64_t left = int64_t(r.x_region.begin - r.x_window.begin) * out_scale_;
      const int64_t rows = int64_t(r.y_region.size()) * out_scale_;
      const int64_t cols = int64_t(r.x_region.size()) * out_scale_;
      const auto& wy = plan.row_weights[r.row];
      const auto& wx = plan.column_weights[r.column];
      const at::Tensor weight =
          at::from_blob(const_cast<float*>(wy.data()), {rows, 1}, at::kFloat) *
          at::from_blob(const_cast<float*>(wx.data()), {1, cols}, at::kFloat);
      out.narrow(2, int64_t(r.y_region.begin) * out_scale_, rows)
          .narrow(3, int64_t(r.x_region.begin) * out_scale_, cols)
          .add_(y.narrow(2, top, rows).narrow(3, left, cols) * weight);
    }
    return out;
  }

  // One call of the network (one frame at a time on the CPU): frames [T, 3, H, W] float32 on
  // the host → [T, 3, H·o, W·o] float32 on the host.
  at::Tensor upscale_whole(const at::Tensor& frames) const {
    return upscale_on_device(frames.to(to_device(device_))).to(at::kCPU).contiguous();
  }

 public:
  // frames [T, 3, H, W] float32 on the model's device → [T, 3, H·o, W·o] float32 there: one
  // call of the network (the CPU: one frame at a time).
  at::Tensor upscale_on_device(const at::Tensor& frames) const {
    const RealEsrganArch& arch = network_->arch();
    const int64_t h = frames.size(2), w = frames.size(3);
    at::Tensor x = frames.to(to_scalar_type(precision_));
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
    fault_point(FaultPoint::kRealEsrganCall, x.size(0) * x.size(2) * x.size(3));
    // On the CPU one frame at a time: RRDB's concatenated features of a 1080p frame take
    // ~1 GiB in fp32, and a batch gains nothing there. On the GPU the slice's frames go in one
    // call (fewer, larger kernels).
    at::Tensor y;
    if (device_.kind == Device::Kind::kCuda || x.size(0) == 1) {
      y = network_->forward(x, /*out_float=*/true);
    } else {
      std::vector<at::Tensor> outs;
      for (int64_t i = 0; i < x.size(0); ++i)
        outs.push_back(network_->forward(x.slice(0, i, i + 1), /*out_float=*/true));
      y = at::cat(outs, 0);
    }
    if (pad_h || pad_w) {
      y = y.slice(2, 0, h * arch.scale).slice(3, 0, w * arch.scale);
    }
    if (out_scale_ != arch.scale) y = lanczos_resize(y, int(h * out_scale_), int(w * out_scale_));
    return y;
  }

  // The device frame path's entry (exec::DeviceFrameModel).
  at::ScalarType frame_dtype() const override { return to_scalar_type(precision_); }
  at::Tensor upscale_frames(const at::Tensor& rgb) const override { return upscale_on_device(rgb); }
  int64_t frames_per_call(int64_t frames, int64_t h, int64_t w, int64_t cap) const override {
    return auto_tiles_ ? frames_that_fit(frames, h, w, cap) : frames;
  }

  bool auto_tiles() const { return auto_tiles_; }
  int out_scale() const { return out_scale_; }
  int64_t pinned_pool_bytes() const { return pinned_pool_bytes_; }
  const Device& device() const { return device_; }
  // Frames per call that fit under `cap` (DeviceContext::device_memory_cap) under `tiling: auto`.
  int64_t frames_that_fit(int64_t frames, int64_t h, int64_t w, int64_t cap) const {
    const int64_t avail = available_bytes(cap);
    if (avail <= 0) return frames;
    return std::clamp<int64_t>(avail / std::max<int64_t>(bytes_per_input_pixel() * h * w, 1), 1,
                               frames);
  }

 private:
  static constexpr int kMinAutoTile = 64;
  Device device_;
  bool auto_tiles_ = false;
  int64_t pinned_pool_bytes_ = 0;
  Precision precision_;
  int out_scale_ = 4;
  std::unique_ptr<Network> network_;
  ModelTraits traits_;
};

Planar RealEsrganSession::run(Planar&& input, const RunContext& ctx) {
  const ModelTraits& traits = model_.traits();
  if (input.channels != 3) {
    throw ModelError(traits.name + ": input has " + std::to_string(input.channels) +
                     " channels, expected 3 (RGB)");
  }
  return guarded("realesrgan", [&] {
    c10::InferenceMode inference;
#ifdef WMBATCH_WITH_CUDA
    if (ctx.device && ctx.device->device().is_cuda()) return run_cuda(std::move(input), ctx);
#endif
    // [1, C, T, H, W] → frames [T, C, H, W]; the network runs every frame of the slice at once.
    const at::Tensor frames = to_tensor(std::move(input))[0].permute({1, 0, 2, 3});
    const at::Tensor out = model_.upscale(
        frames.contiguous(),
        exec::context_for(ctx.device, to_device(model_.device())).device_memory_cap());
    return to_planar(out.permute({1, 0, 2, 3}));
  });
}

#ifdef WMBATCH_WITH_CUDA
// On a device worker: one upload through its pinned staging, the frames permuted and converted
// on the GPU, the output pushed through its pinned offload straight into the slice's Planar
// (the copies overlap the next call). Under `tiling: auto` the frames go in calls that fit the
// memory budget, a call that runs out of memory is halved, and a single frame that still does not
// fit falls back to the host path's tiles.
Planar RealEsrganSession::run_cuda(Planar&& input, const RunContext& ctx) {
  exec::DeviceContext& dc = *ctx.device;
  c10::cuda::CUDAGuard device_guard(dc.device().index());
  exec::OutputSink& sink = dc.output_sink(model_.pinned_pool_bytes());
  const int64_t t_all = input.frames, h = input.height, w = input.width;
  const int o = model_.out_scale();
  const at::Tensor staged = dc.input_stager(model_.pinned_pool_bytes()).upload(input, dc.device());
  const at::Tensor frames = staged[0].permute({1, 0, 2, 3});  // [T, 3, H, W] on the device
  Planar out;
  sink.allocate(out, 3, int(t_all), int(h * o), int(w * o));
  int64_t per_call =
      model_.auto_tiles() ? model_.frames_that_fit(t_all, h, w, dc.device_memory_cap()) : t_all;
  std::vector<std::pair<int64_t, at::Tensor>> host_frames;  // tiled on the host after OOM
  try {
    for (int64_t f0 = 0; f0 < t_all;) {
      const int64_t n = std::min(per_call, t_all - f0);
      try {
        const at::Tensor y = model_.upscale_on_device(frames.narrow(0, f0, n));
        sink.push(y.permute({1, 0, 2, 3}).contiguous(), out, int(f0), 0, 0);
        f0 += n;
      } catch (const c10::OutOfMemoryError&) {
        if (!model_.auto_tiles()) throw;
        c10::cuda::CUDACachingAllocator::emptyCache();
        if (n > 1) {
          per_call = (n + 1) / 2;
          log::warn(kLogger, model_.traits().name + ": out of device memory; " +
                                 std::to_string(per_call) + " frame(s) per call from frame " +
                                 std::to_string(f0));
          continue;
        }
        // One frame that does not fit: the host path's tiles (it retries smaller ones).
        host_frames.emplace_back(f0,
                                 model_.upscale(frames.narrow(0, f0, 1).to(at::kCPU).contiguous(),
                                                dc.device_memory_cap()));
        f0 += 1;
      }
    }
    sink.finish();
  } catch (...) {
    sink.abandon();
    throw;
  }
  for (const auto& [f, y] : host_frames) {
    for (int c = 0; c < 3; ++c) {
      std::memcpy(out.plane(c, int(f)), y[0][c].contiguous().data_ptr<float>(),
                  out.plane_size() * sizeof(float));
    }
  }
  return out;
}
#endif

}  // namespace

std::unique_ptr<RealEsrganNetwork> make_realesrgan_network(RealEsrganWeights weights,
                                                           at::Device device, at::ScalarType dtype,
                                                           bool channels_last,
                                                           const RealEsrganTuning& tuning) {
  return std::make_unique<Network>(std::move(weights), device, dtype, channels_last, tuning);
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
