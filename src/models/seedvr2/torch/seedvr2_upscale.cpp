#include "src/models/seedvr2/seedvr2_upscale.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "src/base/error.h"
#include "src/base/log_text.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/seedvr2/torch/seedvr2_dit.h"
#include "src/models/seedvr2/torch/seedvr2_dit_split.h"
#include "src/models/seedvr2/torch/seedvr2_pixels.h"
#include "src/models/seedvr2/torch/seedvr2_sequence.h"
#include "src/models/seedvr2/torch/seedvr2_upscale_probed.h"
#include "src/models/tensor_model.h"
#include "src/models/torch/tensor.h"
#include "src/models/torch/weights_file.h"

namespace wm::models {
namespace {

using seedvr2::DitArchitecture;
using seedvr2::DitNetwork;

constexpr const char* kLogger = "seedvr2";
constexpr double kLatentScale = 0.9152;  // the DiT's latents: VAE posterior × this (spec §9.7)
constexpr double kTimestep = 1000.0;     // the one step (spec §8)

// Where intermediates go (debug tensors): name → value (any device and dtype).
using Probe = std::function<void(const std::string& name, const at::Tensor& value)>;

// The three random draws of one batch (spec §9.7–8), float32 host tensors: the posterior's ε
// [1, 16, T_l, h, w], the noise and the (unused, drawn all the same) augmentation noise
// [T_l, h, w, 16].
struct Draws {
  at::Tensor eps, noise, aug;
};

// SplitMix64: a batch's generator seed from the job's seed and its first frame, so that a batch
// draws the same numbers wherever it runs (another device, a farm chunk, a resumed run).
uint64_t batch_seed(uint64_t seed, int64_t first_frame) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(first_frame) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

at::Tensor wrap_host(const HostTensor& t) {
  at::ScalarType type;
  if (t.dtype == "F32") {
    type = at::kFloat;
  } else if (t.dtype == "F64") {
    type = at::kDouble;
  } else if (t.dtype == "U8") {
    type = at::kByte;
  } else if (t.dtype == "F16") {
    type = at::kHalf;
  } else if (t.dtype == "BF16") {
    type = at::kBFloat16;
  } else {
    throw ModelError("seedvr2: tensor " + t.name + " is " + t.dtype + " (F32, F64, F16, BF16, U8)");
  }
  at::Tensor out = at::empty(t.shape, type);
  if (size_t(out.nbytes()) != t.bytes.size()) {
    throw ModelError("seedvr2: tensor " + t.name + " holds " + std::to_string(t.bytes.size()) +
                     " bytes for its shape");
  }
  std::memcpy(out.data_ptr(), t.bytes.data(), t.bytes.size());
  return out;
}

HostTensor to_host(const std::string& name, const at::Tensor& value) {
  at::Tensor x = value.to(at::kCPU).contiguous();
  HostTensor out;
  out.name = name;
  if (x.scalar_type() == at::kByte) {
    out.dtype = "U8";
  } else {
    x = x.to(at::kFloat).contiguous();
    out.dtype = "F32";
  }
  out.shape = x.sizes().vec();
  out.bytes.resize(size_t(x.nbytes()));
  std::memcpy(out.bytes.data(), x.data_ptr(), out.bytes.size());
  return out;
}

const HostTensor& input(const std::vector<HostTensor>& inputs, const std::string& name) {
  for (const HostTensor& t : inputs) {
    if (t.name == name) return t;
  }
  throw ModelError("seedvr2: the input has no tensor '" + name + "'");
}

std::string shape_of(const at::Tensor& t) { return shape_text(t.sizes().vec()); }

// How an input's frames are brought to the model's size (spec §9.2–4 for `crop`).
struct Geometry {
  int64_t rh = 0, rw = 0;  // resized
  int64_t h = 0, w = 0;    // what the networks see: multiples of 16
  int64_t top = 0, left = 0;
  bool crop = false;  // centre crop of the resized frame (official); else padded, cropped back
  int64_t out_h() const { return crop ? h : rh; }
  int64_t out_w() const { return crop ? w : rw; }
};

// The DiT of `path`: its architecture (`heads` > 0 sets the head count) and host parameters
// (float32 on the CPU; on CUDA matrices in `dtype`, float8 kept as its bytes).
void load_dit(const std::string& path, int heads, at::Device device, at::ScalarType dtype,
              DitArchitecture& arch, seedvr2::DitParams& params) {
  const WeightsFile file(path);
  arch = seedvr2::infer_dit_architecture(
      [&](const std::string& key) -> const std::vector<int64_t>* {
        const io::TensorInfo* t = file.find(key);
        return t ? &t->shape : nullptr;
      },
      heads);
  std::vector<ExpectedTensor> expected;
  for (const seedvr2::DitParam& p : seedvr2::dit_layout(arch)) {
    expected.push_back({p.key, p.shape, true});
  }
  check_tensors(file, expected, "seedvr2 DiT " + arch.str());
  arch.validate();
  for (const auto& [key, info] : file.tensors()) {
    if (device.is_cuda() && info.dtype == "F8_E4M3" && info.shape.size() == 2) {
      at::Tensor bytes = at::empty(info.shape, at::kByte);
      std::memcpy(bytes.data_ptr(), info.data, info.bytes);
      params[key] = bytes;
      continue;
    }
    at::Tensor t = host_tensor(info);
    if (device.is_cuda() && t.dim() == 2) t = t.to(dtype);
    params[key] = t;
  }
}

// The text embedding [L, width] of `path` (tensor `name`, or the file's only one).
at::Tensor load_text(const std::string& path, const std::string& name, int64_t width) {
  const WeightsFile file(path);
  const io::TensorInfo* info = nullptr;
  if (!name.empty()) {
    info = file.find(name);
    if (!info) throw ModelError(path + ": no tensor '" + name + "' (the text embedding)");
  } else if (file.tensors().size() == 1) {
    info = &file.tensors().begin()->second;
  } else {
    throw ModelError(path + ": holds " + std::to_string(file.tensors().size()) +
                     " tensors; name the text embedding as FILE#TENSOR");
  }
  if (info->shape.size() != 2 || info->shape[1] != width || info->shape[0] < 1 ||
      !readable_float_dtype(info->dtype)) {
    throw ModelError(path + ": the text embedding must be [L, " + std::to_string(width) +
                     "] floats (the DiT's txt_in width); it is " + info->dtype + " " +
                     shape_text(info->shape));
  }
  return host_tensor(*info);
}

// The random draws of a `noise:` file.
Draws load_draws(const std::string& path) {
  const WeightsFile file(path);
  auto get = [&](const char* name) {
    const io::TensorInfo* info = file.find(name);
    if (!info || !readable_float_dtype(info->dtype)) {
      throw ModelError(path + ": no float tensor '" + std::string(name) +
                       "' (model.noise needs vae_sample_eps, noise and aug_noise)");
    }
    return host_tensor(*info);
  };
  return {get("vae_sample_eps"), get("noise"), get("aug_noise")};
}

// The VAE's encoder (mean and logvar: the posterior is sampled) and decoder configs.
ModelConfig vae_config(const ModelConfig& config, const std::string& weights, bool encoder) {
  ModelConfig vae = config;
  vae.kind = "seedvr2-vae";
  vae.weights = weights;
  vae.resolution.clear();
  vae.task = encoder ? "encode" : "decode";
  auto options = std::make_shared<Seedvr2VaeOptions>();
  options->norm_groups = options_as<Seedvr2Options>(config).norm_groups;
  options->logvar = encoder;
  vae.options = std::move(options);
  return vae;
}

class Seedvr2Model;

// One upscaling pass over a batch of frames, with the VAE sessions it uses.
struct Pipeline {
  const Seedvr2Model& model;
  ModelSession& encoder;
  ModelSession& decoder;
  const RunContext* ctx = nullptr;  // the device worker (null: direct calls)
  Probe probe;
};

class Seedvr2Model final : public Model, public TensorModel {
 public:
  // What a model is made of: the DiT's architecture and host parameters, the text embedding,
  // the random draws of a `noise:` file, the VAE's encoder and decoder (none for task dit).
  struct Parts {
    DitArchitecture arch;
    seedvr2::DitParams params;
    at::Tensor text;
    std::optional<Draws> draws;
    std::unique_ptr<Model> encoder, decoder;
  };

  Seedvr2Model(const ModelConfig& config, const Device& device, Parts parts)
      : config_(config),
        device_(device),
        tdevice_(to_device(device)),
        arch_(parts.arch),
        params_(std::move(parts.params)),
        text_(parts.text),
        file_draws_(std::move(parts.draws)),
        encoder_(std::move(parts.encoder)),
        decoder_(std::move(parts.decoder)) {
    o_ = options_of(config);
    dtype_ = to_scalar_type(config.precision);
    traits_.name = "seedvr2";
    traits_.in_channels = 3;
    traits_.out_channels = 3;
    traits_.scale_num = o_.scale > 0 ? o_.scale : 1;
    traits_.target_short_side = o_.scale > 0 ? 0 : short_side(config);
    traits_.halo = 0;
    traits_.halo_exact = false;
    traits_.slice_frames = o_.batch_frames - o_.batch_overlap;
    traits_.slice_overlap = o_.batch_overlap;
    traits_.precisions = {config.precision};
    traits_.split_inside_slices = true;
  }

  static const Seedvr2Options& options_of(const ModelConfig& config) {
    const auto* options = dynamic_cast<const Seedvr2Options*>(config.options.get());
    if (!options) throw ModelError("seedvr2: the model options are missing", kExitSoftware);
    return *options;
  }

  static int short_side(const ModelConfig& config) {
    return config.resolution.size() == 1 ? config.resolution[0] : kSeedvr2DefaultShortSide;
  }

  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device& device) const override;

  std::vector<HostTensor> run_tensors(const std::string& op, const std::vector<HostTensor>& inputs,
                                      bool debug) const override {
    return guarded("seedvr2", [&] {
      c10::InferenceMode inference;
      std::vector<HostTensor> out;
      Probe probe;
      if (debug)
        probe = [&](const std::string& n, const at::Tensor& x) { out.push_back(to_host(n, x)); };
      if (op == "dit") {
        const at::Tensor vid = wrap_host(input(inputs, "vid")).to(at::kFloat);
        const at::Tensor txt = wrap_host(input(inputs, "txt")).to(at::kFloat);
        const at::Tensor t = wrap_host(input(inputs, "timestep"));
        if (t.numel() != 1) throw ModelError("seedvr2: tensor timestep must hold one number");
        const at::Tensor y =
            network(nullptr).forward(vid, txt, t.to(at::kDouble).item<double>(), probe);
        out.insert(out.begin(), to_host("output", y));
        return out;
      }
      if (op == "upscale") {
        if (!encoder_) throw ModelError("seedvr2: this model runs the DiT alone (task dit)");
        if (inputs.empty()) throw ModelError("seedvr2: no input video");
        at::Tensor video = wrap_host(inputs.front());
        if (video.dim() != 4 || video.size(1) != 3) {
          throw ModelError("seedvr2: tensor " + inputs.front().name +
                           " must be [T, 3, H, W] (got " + shape_of(video) + ")");
        }
        // Frames of 8 bits per value, or floats in 0..1.
        video =
            video.scalar_type() == at::kByte ? video.to(at::kFloat) / 255.0 : video.to(at::kFloat);
        auto encoder = encoder_->open_session(device_);
        auto decoder = decoder_->open_session(device_);
        Pipeline p{*this, *encoder, *decoder, nullptr, probe};
        const at::Tensor final_u8 = upscale(p, video, geometry(video.size(2), video.size(3)), 0);
        out.insert(out.begin(), to_host("final_u8", final_u8));
        return out;
      }
      throw ModelError("seedvr2: no tensor operation '" + op + "' (dit, upscale)");
    });
  }

  // The frames of a batch (float32 0..1, [T, 3, H0, W0], any device) → the 8-bit result
  // [T, H', W', 3] (kByte, host). `first_frame` seeds the batch's draws. A rank of a split batch
  // (p.ctx->halo) returns its run's frames; `ends`: whether they end the batch.
  at::Tensor upscale(const Pipeline& p, const at::Tensor& frames, const Geometry& g,
                     int64_t first_frame, bool* ends = nullptr) const;

  Geometry geometry(int64_t height, int64_t width) const {
    Geometry g;
    if (!config_.resolution.empty() && config_.resolution.size() == 2) {
      // The official area rule, then a centre crop to multiples of 16.
      const auto [rh, rw] =
          seedvr2_area_size(int(height), int(width), config_.resolution[0], config_.resolution[1]);
      g.rh = rh, g.rw = rw, g.crop = true;
      std::tie(g.h, g.top) = seedvr2_crop16(rh);
      std::tie(g.w, g.left) = seedvr2_crop16(rw);
    } else {
      const auto [ow, oh] =
          seedvr2_output_size(int(width), int(height), o_.scale, short_side(config_));
      g.rh = oh, g.rw = ow;
      g.h = (oh + 15) / 16 * 16;
      g.w = (ow + 15) / 16 * 16;
    }
    if (g.h < 16 || g.w < 16) {
      throw InputError("seedvr2: frames of " + std::to_string(width) + "x" +
                           std::to_string(height) + " make " + std::to_string(g.rw) + "x" +
                           std::to_string(g.rh) + ", under the 16x16 the model needs",
                       kExitDataErr);
    }
    return g;
  }

  // The DiT on this model's device, made on first use: its blocks stay on the device while they
  // fit beside the activations of the first batch (the rest are streamed from pinned host
  // memory); `context` gives the memory budget.
  const DitNetwork& network(exec::DeviceContext* context, int64_t tokens = 0) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (net_) return *net_;
    seedvr2::DitOptions options;
    options.device = tdevice_;
    options.dtype = dtype_;
#ifdef WMBATCH_WITH_CUDA
    if (tdevice_.is_cuda()) options.resident_bytes = resident_budget(context, tokens);
#else
    (void)context, (void)tokens;
#endif
    net_ = std::make_unique<DitNetwork>(arch_, params_, options);
    params_.clear();  // the network holds what it needs
    if (net_->resident_blocks() < arch_.layers) {
      log::info(kLogger, "seedvr2: " + std::to_string(arch_.layers - net_->resident_blocks()) +
                             " of " + std::to_string(arch_.layers) +
                             " DiT blocks streamed from pinned host memory");
    }
    return *net_;
  }

  const at::Tensor& text() const { return text_; }
  int resident_blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return net_ ? net_->resident_blocks() : 0;
  }
  const std::optional<Draws>& file_draws() const { return file_draws_; }
  const Seedvr2Options& options() const { return o_; }
  const Device& device() const { return device_; }
  at::Device torch_device() const { return tdevice_; }
  at::ScalarType dtype() const { return dtype_; }
  const Model& encoder() const { return *encoder_; }
  const Model& decoder() const { return *decoder_; }

 private:
#ifdef WMBATCH_WITH_CUDA
  // Device bytes the DiT's blocks may keep: −1 (all of them) when they all fit beside what is
  // allocated, the first batch's activations and a reserve for the VAE, within the budget (or
  // what the device has); else 0: every block streams from pinned host memory. Blocks kept
  // resident in part stay on the device while the VAE runs, and the VAE's smallest plan at
  // 1080p needs more than what is left then (the second batch of a 1080p upscale in 16 GiB ran
  // out of memory in its encoder with 17 of 32 blocks resident); a streamed block's copy takes
  // less time than its compute at these token counts, so streaming them all costs little.
  int64_t resident_budget(exec::DeviceContext* context, int64_t tokens) const {
    const c10::cuda::CUDAGuard guard(tdevice_.index());
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(tdevice_.index());
    const int64_t allocated = stats.allocated_bytes[0].current;
    const int64_t cap = exec::context_for(context, tdevice_).device_memory_cap();
    const int64_t elt = int64_t(c10::elementSize(dtype_));
    // Per token: the float32 streams and norms, q/k/v in both dtypes, the MLP's hidden units.
    const int64_t per_token =
        arch_.dim * 4 * 6 + arch_.inner() * (3 * elt + 3 * 4 * 2) + arch_.mlp_hidden * elt * 3;
    const int64_t activations = std::max<int64_t>(tokens, 1) * per_token;
    constexpr int64_t kVaeReserve = int64_t(3) << 30;
    int64_t blocks = 0;
    for (const auto& [key, t] : params_) {
      if (key.rfind("blocks.", 0) == 0)
        blocks += int64_t(t.numel()) * (t.dim() == 2 ? int64_t(t.element_size()) : 4);
    }
    const int64_t room = cap - allocated - activations - kVaeReserve;
    return room >= blocks ? -1 : 0;
  }
#endif

  ModelConfig config_;
  Seedvr2Options o_;
  Device device_;
  at::Device tdevice_;
  at::ScalarType dtype_ = at::kFloat;
  DitArchitecture arch_;
  mutable seedvr2::DitParams params_;  // until the network is made
  at::Tensor text_;                    // [L, txt_in_dim] float32
  std::optional<Draws> file_draws_;
  std::unique_ptr<Model> encoder_, decoder_;
  ModelTraits traits_;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<DitNetwork> net_;
};

// One pass of a VAE session over a whole sequence (a fresh state), on the model's device:
// [1, C, T, H, W] float32 there.
// `split`: this rank's run of a batch split in time (its first latent frame: `head`).
at::Tensor run_vae(ModelSession& session, const at::Tensor& x, const RunContext* outer,
                   exec::HaloExchange* split = nullptr, bool head = true) {
  auto* sequence = dynamic_cast<Seedvr2SequenceSession*>(&session);
  if (!sequence) throw ModelError("seedvr2: its VAE sessions take whole sequences", kExitSoftware);
  RunContext ctx;
  if (outer) ctx.device = outer->device;
  ctx.halo = split;
  ctx.first_slice = head;
  return sequence->run_sequence(x, ctx).to(at::kFloat);
}

// A batch split in time over ranks (RunContext::halo, sequence parallelism inside one batch):
// rank r takes the r-th run of the batch's latent frames, as even as they fall, and the frames
// those come from (latent frame 0 from frame 0, latent frame j > 0 from frames 4j − 3 … 4j).
struct RankRun {
  int64_t latent_begin = 0, latent_end = 0;  // [begin, end) of the batch's latent frames
  int64_t frame_begin = 0, frame_end = 0;    // of its 4k + 1 frames
  std::vector<int64_t> latents;              // every rank's latent frames
};
RankRun rank_run(int rank, int ranks, int64_t latent_frames, int64_t group) {
  RankRun run;
  int64_t at = 0;
  for (int q = 0; q < ranks; ++q) {
    const int64_t n = latent_frames / ranks + (q < latent_frames % ranks ? 1 : 0);
    run.latents.push_back(n);
    if (q == rank) run.latent_begin = at, run.latent_end = at + n;
    at += n;
  }
  auto frames_before = [&](int64_t l) { return l == 0 ? 0 : 1 + group * (l - 1); };
  run.frame_begin = frames_before(run.latent_begin);
  run.frame_end = frames_before(run.latent_end);
  return run;
}

at::Tensor Seedvr2Model::upscale(const Pipeline& p, const at::Tensor& frames, const Geometry& g,
                                 int64_t first_frame, bool* ends) const {
  const at::Device dev = tdevice_;
  auto show = [&](const std::string& name, const at::Tensor& x) {
    if (p.probe) p.probe(name, x);
  };
  const int64_t T = frames.size(0), F = seedvr2_padded_frames(T);
  const ModelTraits& vae = encoder_->traits();
  const int64_t L = vae.out_channels / 2, Tl = encoder_->output_frames(F);
  // A rank of a split batch: every rank has the whole batch's frames and runs its own part
  // (its frames through the VAE, its windows through the DiT); it returns its frames.
  exec::HaloExchange* split =
      p.ctx && p.ctx->halo && p.ctx->halo->ranks() > 1 ? p.ctx->halo : nullptr;
  RankRun run;
  run.latent_end = Tl, run.frame_end = F;
  std::optional<exec::SliceExchange> view;
  if (split) {
    // As many ranks as the batch has latent frames and DiT windows of each layout take part;
    // the others return no frames at once (a short last batch).
    const int64_t th = g.h / vae.scale_den / 2, tw = g.w / vae.scale_den / 2;
    const int active = int(std::min<int64_t>(
        {split->ranks(), Tl, int64_t(seedvr2::dit_windows(int(Tl), int(th), int(tw), false).size()),
         int64_t(seedvr2::dit_windows(int(Tl), int(th), int(tw), true).size())}));
    const int rank = split->rank();
    if (rank >= active) {
      if (ends) *ends = false;
      return at::empty({0, g.crop ? g.h : g.rh, g.crop ? g.w : g.rw, 3}, at::kByte);
    }
    run = rank_run(rank, active, Tl, std::max(1, vae.frame_group));
    if (active > 1) {
      view.emplace(*split, rank, active, rank > 0 ? rank - 1 : -1,
                   rank + 1 < active ? rank + 1 : -1);
      split = &*view;
    } else {
      split = nullptr;  // alone: one device's path
    }
  }
  const int64_t Tr = run.latent_end - run.latent_begin;
  // The run's frames that are real (the rest repeat the last real one).
  const int64_t real = std::max<int64_t>(0, std::min(run.frame_end, T) - run.frame_begin);
  if (ends) *ends = real > 0 && run.frame_begin + real == T;
  at::Tensor source = frames;
  if (split) {
    std::vector<int64_t> pick;
    for (int64_t i = run.frame_begin; i < run.frame_end; ++i) pick.push_back(std::min(i, T - 1));
    source = frames.index_select(0, at::tensor(pick, at::kLong).to(frames.device()));
  }
  // 1–5: resize (antialiased bicubic, a = −0.5), clamp, crop or pad to multiples of 16, [−1, 1].
  at::Tensor x = source.to(dev, at::kFloat);
  if (g.rh != x.size(2) || g.rw != x.size(3)) x = seedvr2::resize_bicubic_aa(x, g.rh, g.rw);
  x = x.clamp(0.0, 1.0);
  if (g.crop) {
    x = x.narrow(2, g.top, g.h).narrow(3, g.left, g.w);
  } else if (g.h != g.rh || g.w != g.rw) {
    x = at::replication_pad2d(x, {0, g.w - g.rw, 0, g.h - g.rh});
  }
  const at::Tensor reference = ((x - 0.5) / 0.5).contiguous();  // [T, 3, h, w]
  x.reset();  // (device memory: the VAE and the DiT need it more)
  // 6: 4k + 1 frames, the last repeated (a split batch's runs hold their padding already).
  at::Tensor padded = reference;
  if (!split && F > T)
    padded = at::cat({reference, reference.narrow(0, T - 1, 1).expand({F - T, 3, g.h, g.w})});
  const at::Tensor vae_input = padded.permute({1, 0, 2, 3}).unsqueeze(0);  // [1, 3, F, h, w]
  show("vae_input", vae_input);

  // 7: the posterior, sampled. The seeded draws (host generator: the same numbers on every
  // device) are made on another thread while the encoder runs.
  const int64_t lh = g.h / vae.scale_den, lw = g.w / vae.scale_den;
  std::future<Draws> draws;
  if (!file_draws_) {
    const uint64_t seed = batch_seed(uint64_t(o_.seed), first_frame);
    draws = std::async(std::launch::async, [seed, L, Tl, lh, lw] {
      c10::InferenceMode inference;
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      Draws d;
      d.eps = at::randn({1, L, Tl, lh, lw}, gen, at::kFloat);
      d.noise = at::randn({Tl, lh, lw, L}, gen, at::kFloat);
      d.aug = at::randn({Tl, lh, lw, L}, gen, at::kFloat);
      return d;
    });
  }
  // [1, 32, T_l, h/8, w/8] (a rank: its latent frames)
  const at::Tensor posterior = run_vae(p.encoder, vae_input, p.ctx, split, run.latent_begin == 0);
  if (posterior.size(1) != 2 * L || posterior.size(2) != Tr || posterior.size(3) != lh ||
      posterior.size(4) != lw) {
    throw ModelError("seedvr2: the VAE encoder made a posterior of " + shape_of(posterior) +
                         ", expected " + shape_text({1, 2 * L, Tr, lh, lw}),
                     kExitSoftware);
  }
  const at::Tensor mean = posterior.narrow(1, 0, L), logvar = posterior.narrow(1, L, L);
  show("vae_posterior_mean", mean);
  show("vae_posterior_logvar", logvar);
  Draws d;
  if (file_draws_) {
    d = *file_draws_;
    const std::vector<int64_t> eps_shape{1, L, Tl, lh, lw}, noise_shape{Tl, lh, lw, L};
    if (d.eps.sizes().vec() != eps_shape || d.noise.sizes().vec() != noise_shape ||
        d.aug.sizes().vec() != noise_shape) {
      throw ModelError(o_.noise + ": the draws must be vae_sample_eps " + shape_text(eps_shape) +
                       " and noise, aug_noise " + shape_text(noise_shape) +
                       " for this batch (they are " + shape_of(d.eps) + ", " + shape_of(d.noise) +
                       ", " + shape_of(d.aug) + ")");
    }
  } else {
    d = draws.get();
  }
  show("vae_sample_eps", d.eps);
  const at::Tensor eps = d.eps.narrow(2, run.latent_begin, Tr);
  const at::Tensor z = mean + at::exp(logvar / 2) * eps.to(dev, at::kFloat);
  at::Tensor cond_latent = (z * kLatentScale).squeeze(0).permute({1, 2, 3, 0}).to(dev);
  // Every rank's latent frames, in order: the DiT takes the whole batch.
  if (split) cond_latent = seedvr2::gather_rows(cond_latent.contiguous(), run.latents, *split);
  show("cond_latent", cond_latent);
  const at::Tensor noise = d.noise.to(dev, at::kFloat);
  show("noise", noise);
  show("aug_noise", d.aug);
  // 8: the condition: the latent (noise strength 0 leaves it as it is) and a mask of ones.
  const at::Tensor condition =
      at::cat({cond_latent, at::ones({Tl, lh, lw, 1}, cond_latent.options())}, 3);
  show("condition", condition);
  show("text_pos", text_);
  show("timestep", at::full({1}, kTimestep, at::kFloat));
  // 9: one DiT step at t = 1000: latent = noise − v.
  const at::Tensor dit_input = at::cat({noise, condition}, 3);
  show("dit_input", dit_input);
  const DitNetwork& net = network(p.ctx ? p.ctx->device : nullptr, Tl * (lh / 2) * (lw / 2));
  const at::Tensor dit_output =
      net.forward(dit_input, text_, kTimestep, {}, p.ctx ? p.ctx->device : nullptr, split);
  show("dit_output", dit_output);
  const at::Tensor latent_out = noise - dit_output;
  show("latent_out", latent_out);
  // 10: decode latent / 0.9152.
  // (A rank decodes its latent frames.)
  const at::Tensor decode_input = (latent_out / kLatentScale)
                                      .narrow(0, run.latent_begin, Tr)
                                      .permute({3, 0, 1, 2})
                                      .unsqueeze(0);
  show("vae_decode_input", decode_input);
  // [3, F, h, w] (a rank: its run's frames)
  const at::Tensor decoded =
      run_vae(p.decoder, decode_input, p.ctx, split, run.latent_begin == 0).squeeze(0);
  show("decoded", decoded);
  // 11–12: the real frames, colour fixed against the reference.
  const at::Tensor content = decoded.narrow(1, 0, real).permute({1, 0, 2, 3}).to(dev).contiguous();
  at::Tensor fixed;
  switch (o_.color_fix) {
    case Seedvr2Options::ColorFix::kWavelet:
      fixed = seedvr2::wavelet_color_fix(content, reference.narrow(0, 0, real));
      break;
    case Seedvr2Options::ColorFix::kAdain:
      fixed = seedvr2::adain_color_fix(content, reference.narrow(0, 0, real));
      break;
    case Seedvr2Options::ColorFix::kNone:
      fixed = content;
      break;
  }
  show("colorfix_out", fixed);
  // 13: 8 bits, halves to even.
  at::Tensor out = at::round((fixed.clamp(-1.0, 1.0) * 0.5 + 0.5) * 255.0).to(at::kByte);
  if (!g.crop) out = out.narrow(2, 0, g.rh).narrow(3, 0, g.rw);
  return out.permute({0, 2, 3, 1}).contiguous().to(at::kCPU);  // [T, H', W', 3]
}

class Seedvr2Session final : public ModelSession {
 public:
  explicit Seedvr2Session(const Seedvr2Model& model)
      : model_(model),
        encoder_(model.encoder().open_session(model.device())),
        decoder_(model.decoder().open_session(model.device())) {}

  Planar run(Planar&& input, const RunContext& ctx) override {
    return guarded("seedvr2", [&] {
      c10::InferenceMode inference;
      const int real = input.frames - ctx.padded_frames;
      if (real < 1) throw ModelError("seedvr2: a slice without frames", kExitSoftware);
      const int height = input.height, width = input.width;
      // [1, 3, T, H, W] → the real frames [T, 3, H, W].
      const at::Tensor frames =
          to_tensor(std::move(input)).squeeze(0).permute({1, 0, 2, 3}).narrow(0, 0, real);
      const Geometry g = model_.geometry(height, width);
      Pipeline p{model_, *encoder_, *decoder_, &ctx, {}};
      bool ends = true;
      // [T, H', W', 3] (a rank of a split batch: its run's frames)
      const at::Tensor u8 = model_.upscale(p, frames, g, ctx.first_frame, &ends);
      // Values k / 255, the frames the writer gets; padding frames repeat the last (after the
      // rank that ends the batch).
      at::Tensor out = u8.permute({3, 0, 1, 2}).to(at::kFloat).div_(255.0);
      if (ctx.padded_frames > 0 && ends) {
        out = at::cat(
            {out,
             out.narrow(1, real - 1, 1).expand({3, ctx.padded_frames, out.size(2), out.size(3)})},
            1);
      }
      return to_planar(out);
    });
  }

 private:
  const Seedvr2Model& model_;
  std::unique_ptr<ModelSession> encoder_, decoder_;
};

std::unique_ptr<ModelSession> Seedvr2Model::open_session(const Device& device) const {
  if (!encoder_) throw ModelError("seedvr2: this model runs the DiT alone (task dit)");
  if (device.str() != device_.str()) {
    throw ModelError("seedvr2: a session on " + device.str() + " of a model on " + device_.str(),
                     kExitSoftware);
  }
  return std::make_unique<Seedvr2Session>(*this);
}

// Before the DiT's first upload: the VAE plans its passes close to the device's budget and asks
// for growable allocator segments, which LibTorch reads when its allocator first allocates, so
// the DiT (loaded first) must not have allocated before the ask.
void ask_device_settings(const Device& device) {
  if (device.kind != Device::Kind::kCuda) return;
  exec::DeviceSettings settings;
  settings.growable_segments = true;
  exec::device_layer().ask(settings);
}

}  // namespace

std::unique_ptr<Model> make_seedvr2(const ModelConfig& config, const Device& device) {
  return guarded("seedvr2", [&]() -> std::unique_ptr<Model> {
    const Seedvr2Options& o = Seedvr2Model::options_of(config);
    const at::Device where = to_device(device);
    const at::ScalarType dtype = to_scalar_type(config.precision);
    if (device.kind == Device::Kind::kCpu && dtype == at::kHalf) {
      throw ModelError("seedvr2: fp16 is not supported on CPU (use fp32 or bf16)");
    }
    if (o.dit.empty()) throw ModelError("seedvr2: model.dit (the DiT checkpoint) is required");
    Seedvr2Model::Parts parts;
    ask_device_settings(device);
    load_dit(o.dit, o.heads, where, dtype, parts.arch, parts.params);
    if (config.task != "dit") {  // the DiT alone takes its text from its inputs
      if (o.text_embedding.empty() || o.vae.empty()) {
        throw ModelError("seedvr2: model.vae and model.text_embedding are required to upscale");
      }
      parts.text = load_text(o.text_embedding, o.text_tensor, parts.arch.txt_in_dim);
      if (!o.noise.empty()) parts.draws = load_draws(o.noise);
      parts.encoder = make_seedvr2_vae(vae_config(config, o.vae, true), device);
      parts.decoder = make_seedvr2_vae(vae_config(config, o.vae, false), device);
    }
    return std::make_unique<Seedvr2Model>(config, device, std::move(parts));
  });
}

std::unique_ptr<Model> make_seedvr2_random(const ModelConfig& config,
                                           const seedvr2::DitArchitecture& dit,
                                           const seedvr2::Architecture& vae, int text_tokens,
                                           const Device& device, uint64_t seed) {
  return guarded("seedvr2: random weights", [&]() -> std::unique_ptr<Model> {
    Seedvr2Model::Parts parts;
    ask_device_settings(device);
    parts.arch = dit;
    const at::ScalarType dtype =
        device.kind == Device::Kind::kCpu ? at::kFloat : to_scalar_type(config.precision);
    parts.params = seedvr2::random_dit_params(dit, seed, dtype);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
    parts.text = at::randn({text_tokens, dit.txt_in_dim}, gen, at::kFloat);
    parts.encoder = make_seedvr2_vae_random(vae_config(config, "", true), vae, device, seed + 2);
    parts.decoder = make_seedvr2_vae_random(vae_config(config, "", false), vae, device, seed + 3);
    return std::make_unique<Seedvr2Model>(config, device, std::move(parts));
  });
}

Planar seedvr2_upscale_batch(const Model& model, const Planar& frames, const RunContext& ctx) {
  return seedvr2::upscale_batch_probed(model, frames, ctx, {});
}

namespace seedvr2 {

Planar upscale_batch_probed(const Model& model, const Planar& frames, const RunContext& ctx,
                            const DitProbe& probe) {
  const auto* m = dynamic_cast<const Seedvr2Model*>(&model);
  if (!m) throw ModelError("seedvr2_upscale_batch: not a seedvr2 model", kExitSoftware);
  return guarded("seedvr2", [&] {
    c10::InferenceMode inference;
    auto encoder = m->encoder().open_session(m->device());
    auto decoder = m->decoder().open_session(m->device());
    Pipeline p{*m, *encoder, *decoder, &ctx, probe};
    Planar copy = frames.clone();
    const at::Tensor x = to_tensor(std::move(copy)).squeeze(0).permute({1, 0, 2, 3});
    const at::Tensor u8 = m->upscale(p, x, m->geometry(frames.height, frames.width),
                                     ctx.first_frame);  // [T, H', W', 3]
    return to_planar(u8.permute({3, 0, 1, 2}).to(at::kFloat).div_(255.0));
  });
}

}  // namespace seedvr2

int seedvr2_resident_blocks(const Model& model) {
  const auto* m = dynamic_cast<const Seedvr2Model*>(&model);
  return m ? m->resident_blocks() : 0;
}

Seedvr2StageSeconds seedvr2_time_batch(const Model& model, const Planar& frames,
                                       exec::DeviceContext* context) {
  const auto* m = dynamic_cast<const Seedvr2Model*>(&model);
  if (!m) throw ModelError("seedvr2_time_batch: not a seedvr2 model", kExitSoftware);
  return guarded("seedvr2", [&] {
    c10::InferenceMode inference;
    auto encoder = m->encoder().open_session(m->device());
    auto decoder = m->decoder().open_session(m->device());
    Seedvr2StageSeconds out;
    using Clock = std::chrono::steady_clock;
    Clock::time_point last = Clock::now();
    auto sync = [&] {
#ifdef WMBATCH_WITH_CUDA
      if (m->torch_device().is_cuda()) c10::cuda::device_synchronize();
#endif
    };
    auto allocated = [&](const std::string& stage) {
#ifdef WMBATCH_WITH_CUDA
      if (!m->torch_device().is_cuda()) return;
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(m->torch_device().index());
      out.allocated.emplace_back(stage, stats.allocated_bytes[0].current);
      out.peak_allocated = std::max<int64_t>(out.peak_allocated, stats.allocated_bytes[0].peak);
#else
      (void)stage;
#endif
    };
    auto lap = [&](double& into) {
      sync();
      const Clock::time_point now = Clock::now();
      into += std::chrono::duration<double>(now - last).count();
      last = now;
    };
    const std::map<std::string, double*> stages = {{"vae_input", &out.resize},
                                                   {"vae_posterior_mean", &out.encode},
                                                   {"dit_output", &out.dit},
                                                   {"decoded", &out.decode},
                                                   {"colorfix_out", &out.color_fix}};
    RunContext ctx;
    ctx.device = context;
    Pipeline p{*m, *encoder, *decoder, &ctx, [&](const std::string& name, const at::Tensor&) {
                 const auto it = stages.find(name);
                 if (it == stages.end()) return;
                 lap(*it->second);
                 allocated(name);
               }};
    Planar copy = frames.clone();
    const at::Tensor x = to_tensor(std::move(copy)).squeeze(0).permute({1, 0, 2, 3});
#ifdef WMBATCH_WITH_CUDA
    if (m->torch_device().is_cuda()) {
      c10::cuda::CUDACachingAllocator::resetPeakStats(m->torch_device().index());
    }
#endif
    allocated("start");
    const Clock::time_point start = Clock::now();
    last = start;
    m->upscale(p, x, m->geometry(frames.height, frames.width), 0);
    sync();
    out.total = std::chrono::duration<double>(Clock::now() - start).count();
    return out;
  });
}

}  // namespace wm::models
