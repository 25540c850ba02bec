#include "src/models/wan21/wan21_vae.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <torch/version.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "src/base/error.h"
#include "src/base/log_text.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/models/torch/state_tensor.h"
#include "src/models/torch/tensor.h"
#include "src/models/wan21/torch/wan21_blocks.h"
#include "src/weights/safetensors.h"

namespace wm::models {

using wan21::Architecture;
using wan21::Network;
using wan21::ParamSpec;
using wan21::SequenceState;
using wan21::TailPlan;
using wan21::Task;

namespace {

constexpr const char* kLogger = "wan2.1-vae";

// Official Wan2.1 latent statistics, as float32 values (the golden data's meta.json).
const std::vector<double> kLatentMean = {
    -0.757099986076355,   -0.708899974822998,   -0.911300003528595,  0.10750000178813934,
    -0.1745000034570694,  0.9653000235557556,   -0.1517000049352646, 1.5507999658584595,
    0.41339999437332153,  -0.07150000333786011, 0.5516999959945679,  -0.36320000886917114,
    -0.19220000505447388, -0.9496999979019165,  0.25029999017715454, -0.2921000123023987};
const std::vector<double> kLatentStd = {
    2.8183999061584473, 1.4541000127792358, 2.327500104904175,  2.6558001041412354,
    1.219599962234497,  1.770799994468689,  2.6052000522613525, 2.0743000507354736,
    3.268699884414673,  2.152600049972534,  2.8652000427246094, 1.5578999519348145,
    1.638200044631958,  1.1253000497817993, 2.8250999450683594, 1.9160000085830688};

// Recommended spatial tile overlap (halo_exact = false: attention sees the whole frame, so no
// finite halo is exact). Measured with random weights; see docs/wan21-vae.md.
constexpr int kDecodeHaloLatent = 8;

// What splitting a decode slice costs (ModelTraits::split_costs), walking the decoder as
// wan21::Network builds it: per latent pixel, the causal history a time split passes on (two
// frames of every causal conv's input at its resolution); per latent column and latent frame,
// the rows a band passes to a neighbour (one row of every 3×3 conv's input, at its resolution
// and frame rate, and one source row per upsample) and its messages; compute from the
// reference decoder's ~8.5 MFLOP per output pixel at dim 96.
SplitCosts decode_split_costs(const Architecture& a, int64_t element_size) {
  SplitCosts c;
  c.temporal_factor = a.temporal_factor;
  c.spatial_factor = a.spatial_factor;
  c.flops_per_pixel = 8.5e6 * double(a.dim) * a.dim / (96.0 * 96.0);
  const double e = double(element_size);
  double scale = 1, rate = 1;           // pixels per latent pixel per side, frames per latent frame
  auto conv3 = [&](int64_t channels) {  // a causal 3×3×3 conv with `channels` inputs
    c.state_bytes_per_pixel += 2 * double(channels) * scale * scale * e;
    c.row_bytes_per_column += double(channels) * scale * rate * e;
    c.row_messages += 1;
  };
  auto residual = [&](int64_t in, int64_t out) {
    conv3(in);
    conv3(out);
  };
  const std::vector<int>& m = a.dim_mult;
  const int64_t top = int64_t(a.dim) * m.back();
  conv3(a.z_dim);  // conv_in
  residual(top, top);
  c.row_messages += 2;  // the attention's gather (counts, tokens)
  residual(top, top);
  const int stages = int(m.size());
  for (int i = 0; i < stages; ++i) {
    const int64_t out = int64_t(a.dim) * m[size_t(stages - 1 - i)];
    const int64_t in = i == 0 ? top : int64_t(a.dim) * m[size_t(stages - i)] / 2;
    for (int r = 0; r <= a.num_res_blocks; ++r) residual(r == 0 ? in : out, out);
    if (i == stages - 1) break;
    if (a.temporal_down[a.temporal_down.size() - 1 - size_t(i)]) {
      c.state_bytes_per_pixel += 2 * double(out) * scale * scale * e;  // its time conv
      rate *= 2;
    }
    c.row_bytes_per_column += double(out) * scale * rate * e;  // one source row of the upsample
    c.row_messages += 1;
    scale *= 2;
  }
  conv3(int64_t(a.dim) * m.front());  // the head
  return c;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Task task_of(const ModelConfig& config) {
  if (config.task == "decode") return Task::kDecode;
  if (config.task == "encode") return Task::kEncode;
  throw ModelError("wan2.1-vae: task must be decode or encode, not '" + config.task + "'");
}

std::vector<double> latent_stat(const std::vector<double>& given,
                                const std::vector<double>& official, int z_dim, const char* name) {
  const std::vector<double>& v = given.empty() ? official : given;
  if (int(v.size()) != z_dim) {
    throw ModelError(std::string("wan2.1-vae: ") + name + " has " + std::to_string(v.size()) +
                     " values, z_dim is " + std::to_string(z_dim) +
                     (given.empty() ? " (the official values are for z_dim 16)" : ""));
  }
  return v;
}

// Host float32 parameters by key.
using ParamMap = std::map<std::string, at::Tensor>;

// Hands out `params` converted to the run device, dtype (and, through the builder, layout).
class MapSource : public wan21::ParamSource {
 public:
  MapSource(const ParamMap& params, at::Device device, at::ScalarType dtype)
      : params_(params), device_(device), dtype_(dtype) {}
  at::Tensor get(const std::string& key, const std::vector<int64_t>&) override {
    return params_.at(key).to(device_, dtype_);
  }

 private:
  const ParamMap& params_;
  at::Device device_;
  at::ScalarType dtype_;
};

at::ScalarType file_dtype(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F64") return at::kDouble;
  return at::ScalarType::Undefined;
}

// Loads and checks the parameters `task` needs from a safetensors file: every key the task uses
// must be present with the shape the config implies; keys of the other half are optional but must
// have the right shape; keys outside the layout are errors.
ParamMap load_params(const ModelConfig& config, const std::vector<ParamSpec>& specs, Task task) {
  const std::string& path = config.weights;
  if (path.empty()) throw ModelError("wan2.1-vae: model.weights (a .safetensors file) is required");
  std::optional<io::SafetensorsFile> file;
  try {
    file.emplace(path);
  } catch (const InputError& e) {
    throw ModelError(e.what(), e.exit_code());
  }

  // Problems of the task's own keys first, then of the other half, then unknown keys.
  std::vector<std::string> problems;
  bool shape_problem = false;
  std::set<std::string> known;
  for (bool own : {true, false}) {
    for (const ParamSpec& spec : specs) {
      if ((spec.task == task) != own) continue;
      known.insert(spec.key);
      if (!file->has(spec.key)) {
        if (own) {
          problems.push_back("missing key " + spec.key + " (expected shape " +
                             shape_string(spec.shape) + ")");
        }
        continue;
      }
      const io::TensorInfo& info = file->info(spec.key);
      if (info.shape != spec.shape) {
        problems.push_back(spec.key + ": expected shape " + shape_string(spec.shape) +
                           ", file has " + shape_string(info.shape));
        shape_problem = true;
      } else if (file_dtype(info.dtype) == at::ScalarType::Undefined) {
        problems.push_back(spec.key + ": dtype " + info.dtype +
                           " is not supported (F32, F16, BF16)");
      }
    }
  }
  for (const std::string& name : file->names()) {
    if (!known.count(name)) problems.push_back("unexpected key " + name);
  }
  if (!problems.empty()) {
    std::string msg = path + ": " + problems.front();
    std::string note;
    if (shape_problem) {
      const Wan21VaeOptions& o = options_as<Wan21VaeOptions>(config);
      note = "model config dim=" + std::to_string(o.dim) + ", z_dim=" + std::to_string(o.z_dim);
    }
    if (problems.size() > 1) {
      note += (note.empty() ? "" : "; ") + std::to_string(problems.size() - 1) + " more problem" +
              (problems.size() > 2 ? "s" : "");
    }
    if (!note.empty()) msg += " (" + note + ")";
    throw ModelError(msg);
  }

  ParamMap params;
  for (const ParamSpec& spec : specs) {
    if (spec.task != task) continue;
    const io::TensorInfo& info = file->info(spec.key);
    // Copy out of the mapping (its data need not be aligned), then widen to float32.
    at::Tensor t = at::empty(spec.shape, at::TensorOptions().dtype(file_dtype(info.dtype)));
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    params.emplace(spec.key, t.to(at::kFloat));
  }
  return params;
}

ParamMap random_params(const std::vector<ParamSpec>& specs, Task task, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  ParamMap params;
  int64_t fan_in = 1;  // of the conv whose weight came last: its bias uses the same bound
  for (const ParamSpec& spec : specs) {
    if (spec.task != task) continue;
    at::Tensor t = at::empty(spec.shape, at::kFloat);
    const bool gamma =
        spec.key.size() > 6 && spec.key.compare(spec.key.size() - 6, 6, ".gamma") == 0;
    if (gamma) {
      t.fill_(1.0);
    } else {
      if (spec.shape.size() > 1) {
        fan_in = 1;
        for (size_t i = 1; i < spec.shape.size(); ++i) fan_in *= spec.shape[i];
      }
      const double bound = 1.0 / std::sqrt(double(fan_in));
      t.uniform_(-bound, bound, gen);
    }
    params.emplace(spec.key, t);
  }
  return params;
}

// Owns what it needs (traits copy, shared network): it may outlive the Model.
//
// Device execution comes from the device worker running the call (RunContext::device,
// src/exec/device_context.h): the session computes on the current stream, which the worker set.
// On CUDA, decode output leaves the device in frame chunks (Network::forward_chunks) through the
// worker's output sink (a bounded pinned pool with its own copier thread), so the copies and the
// host side overlap the next chunk's compute and stay off the thread that launches it; inputs go
// up through the worker's staging. The decode tail's plan (chunk length, exact spatial tiles,
// causal state in host memory) is chosen from the memory the device has (or the worker's memory
// budget) at the first slice of a sequence. An out-of-memory error retries the slice from the
// state it started with, with half the chunk length (or, in the first slice, twice the tiles);
// later slices keep what fitted. Without a worker (a direct call) a CUDA session runs the plain
// whole-slice path with plain copies.
//
// Sequence parallelism (RunContext::halo, decode only): the session runs its rank's part of the
// slice on the same path as one device (CUDA: worker stream, raw cuDNN convs, the memory-planned
// tail, the output sink); every causal layer's history comes through the exchange's ring
// (HaloExchange::history_from: the rank before, or for rank 0 the previous slice's last rank;
// none: the session's own state) and goes on to history_to() as soon as it exists. The tail's
// tile grid is rank 0's, planned for the part with the rank's share of the device's memory and
// passed along the ranks (whole frames in more tiles preferred: a rank's chunked tail holds the
// next rank back until its last chunk); an out-of-memory error fails the slice (the other ranks
// cannot retry in step).
//
// Spatial parallelism (RunContext::halo with halo_rows): the session runs every frame of its
// band of rows on the same path (SequenceState::row_halo; the tail's frame chunks are rank 0's
// plan, passed down the bands so that every rank exchanges rows in step); its state is its
// band's and stays with it from slice to slice.
//
// A rank of a split slice writes its output into RunContext::into (no gather copy).
class Wan21Session final : public ModelSession {
 public:
  Wan21Session(const ModelTraits& traits, std::shared_ptr<const Network> net, at::Device device,
               at::ScalarType dtype, int temporal_factor, int64_t pinned_pool_bytes)
      : traits_(traits),
        net_(std::move(net)),
        device_(device),
        dtype_(dtype),
        temporal_factor_(temporal_factor),
        pinned_pool_bytes_(pinned_pool_bytes) {}
  Planar run(Planar&& input, const RunContext& ctx) override;
  bool export_state(std::vector<StateTensor>& out) const override;
  bool import_state(const std::vector<StateTensor>& in) override;

 private:
  void check(const Planar& input, const RunContext& ctx) const;
  Planar run_cuda_decode(Planar&& input, const RunContext& ctx);
  TailPlan steady_rank_plan(int tile, int64_t frames, const TailPlan& fresh);  // CUDA builds
  // The input as the network takes it: run dtype and memory format, on the session's device (on
  // CUDA through the worker's pinned staging and a copy stream, ordered before the current
  // stream).
  at::Tensor upload(Planar&& input);

  ModelTraits traits_;
  std::shared_ptr<const Network> net_;
  at::Device device_;
  at::ScalarType dtype_;
  int temporal_factor_;
  int64_t pinned_pool_bytes_;           // per staging pool; 0: kDefaultPinnedPoolBytes
  std::map<int, SequenceState> tiles_;  // by RunContext::tile_index
  std::map<int, TailPlan> plans_;       // CUDA decode: the tail plan of each tile's sequence
  // A time split's rank: its own chunking of the tail, by (tile, frames); see steady_rank_plan.
  std::map<std::pair<int, int64_t>, TailPlan> rank_plans_;
  // For the call in progress: the worker running it (may be null), the halo exchange (a time
  // split's, or with rows_ a row split's).
  exec::DeviceContext* context_ = nullptr;
  exec::HaloExchange* halo_ = nullptr;
  bool rows_ = false;
};

class Wan21Model final : public Model {
 public:
  Wan21Model(const ModelConfig& config, Task task, const Device& device, ParamMap params)
      : arch_(Architecture::from(config)),
        task_(task),
        precision_(config.precision),
        pinned_pool_bytes_(config.pinned_pool_bytes),
        tuning_(wan21::Tuning::parse(config.tuning)),
        params_(std::move(params)),
        mean_(latent_stat(options_as<Wan21VaeOptions>(config).latent_mean, kLatentMean, arch_.z_dim,
                          "latent_mean")),
        std_(latent_stat(options_as<Wan21VaeOptions>(config).latent_std, kLatentStd, arch_.z_dim,
                         "latent_std")) {
    for (double s : std_) {
      if (!(s > 0)) throw ModelError("wan2.1-vae: latent_std values must be positive");
    }
    ModelTraits& t = traits_;
    t.causal_state = true;
    t.halo_exact = false;
    t.precisions = {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16};
    const int s = arch_.spatial_factor;
    if (task == Task::kDecode) {
      t.name = "wan2.1-vae decode";
      t.in_channels = arch_.z_dim;
      t.out_channels = 3;
      t.scale_num = s;
      t.scale_den = 1;
      t.halo = kDecodeHaloLatent;
      t.sequence_parallel = true;
      t.spatial_parallel = true;
      t.split_costs = decode_split_costs(arch_, config.precision == Precision::kFloat32 ? 4 : 2);
    } else {
      t.name = "wan2.1-vae encode";
      t.in_channels = 3;
      t.out_channels = arch_.z_dim;
      t.scale_num = 1;
      t.scale_den = s;
      t.size_multiple = s;
      t.halo = kDecodeHaloLatent * s;
      t.frame_group = arch_.temporal_factor;
      t.frame_offset = 1;
    }
    network_for(device);  // weights on the main device now: errors surface at construction
  }

  const ModelTraits& traits() const override { return traits_; }
  int64_t output_frames(int64_t frames) const override {
    if (frames <= 0) return 0;
    const int64_t f = arch_.temporal_factor;
    return task_ == Task::kDecode ? 1 + f * (frames - 1) : 1 + (frames - 1) / f;
  }
  std::unique_ptr<ModelSession> open_session(const Device& device) const override {
    auto net = network_for(device);
    return std::make_unique<Wan21Session>(traits_, net, to_device(device), dtype_for(device),
                                          arch_.temporal_factor, pinned_pool_bytes_);
  }

 private:
  at::ScalarType dtype_for(const Device& device) const {
    if (device.kind == Device::Kind::kCpu && precision_ == Precision::kFloat16) {
      throw ModelError("wan2.1-vae: fp16 is not supported on CPU (use fp32, or bf16)");
    }
    return to_scalar_type(precision_);
  }

  // One network per device, built on first use from the host parameters.
  std::shared_ptr<const Network> network_for(const Device& device) const {
    const at::ScalarType dtype = dtype_for(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = networks_[device.str()];
    if (!slot) {
      slot = guarded("wan2.1-vae: loading weights", [&] {
        c10::InferenceMode inference;
        const at::Device dev = to_device(device);
        if (device.kind == Device::Kind::kCuda) {
          // Asked of the device layer before the weights' upload below. Tiles and chunks of
          // several sizes fragment the caching allocator's fixed segments (~1 GiB reserved but
          // unusable at a 12 GiB cap); growable segments measured 6 % faster at 1080p in 12 GiB
          // (fewer out-of-memory retries). Shapes repeat slice after slice: cuDNN times its
          // algorithms once per shape. Float32 runs are meant to be exact: no TF32 (LibTorch
          // enables it for cuDNN convs by default, ~3.5e-3 error here).
          exec::DeviceSettings settings;
          settings.growable_segments = true;
          settings.cudnn_benchmark = tuning_.cudnn_benchmark ? 1 : 0;
          settings.cudnn_benchmark_limit = tuning_.cudnn_benchmark_limit;
          settings.exact_float32_convs = settings.exact_float32_matmuls = dtype == at::kFloat;
          exec::device_layer().ask(settings);
        }
        // channels_last_3d is what cuDNN's fast 3-D convs want; on CPU (oneDNN) the default
        // layout measured as fast or faster.
        const at::MemoryFormat format = device.kind == Device::Kind::kCuda
                                            ? at::MemoryFormat::ChannelsLast3d
                                            : at::MemoryFormat::Contiguous;
        auto stat = [&](const std::vector<double>& v) {
          return at::tensor(v, at::kDouble).reshape({1, -1, 1, 1, 1}).to(dev, dtype);
        };
        MapSource source(params_, dev, dtype);
        auto net = std::make_shared<const Network>(arch_, task_, source, stat(mean_), stat(std_),
                                                   format, tuning_);
#ifdef WMBATCH_WITH_CUDA
        // Sessions run on their own streams: the weight uploads must be complete first.
        if (device.kind == Device::Kind::kCuda) c10::cuda::device_synchronize();
#endif
        return net;
      });
    }
    return slot;
  }

  Architecture arch_;
  Task task_;
  Precision precision_;
  int64_t pinned_pool_bytes_;
  wan21::Tuning tuning_;
  ParamMap params_;  // host float32 master copy
  std::vector<double> mean_, std_;
  ModelTraits traits_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const Network>> networks_;
};

void Wan21Session::check(const Planar& in, const RunContext& ctx) const {
  const ModelTraits& t = traits_;
  const std::string where = t.name + ": ";
  if (in.channels != t.in_channels) {
    throw ModelError(where + "input has " + std::to_string(in.channels) + " channels, expected " +
                     std::to_string(t.in_channels));
  }
  if (in.frames < 1 || in.height < 1 || in.width < 1) {
    throw ModelError(where + "empty input [" + std::to_string(in.channels) + ", " +
                     std::to_string(in.frames) + ", " + std::to_string(in.height) + ", " +
                     std::to_string(in.width) + "]");
  }
  if (net_->task() == Task::kEncode) {
    const int s = t.size_multiple, g = t.frame_group;
    if (in.height % s != 0 || in.width % s != 0) {
      throw ModelError(where + "frame size " + std::to_string(in.width) + "x" +
                       std::to_string(in.height) + " is not a multiple of " + std::to_string(s));
    }
    if (ctx.first_slice && (in.frames - 1) % g != 0) {
      throw ModelError(where + "the first slice has " + std::to_string(in.frames) +
                       " frames; it needs 1 + " + std::to_string(g) +
                       "k (pad by repeating the last frame)");
    }
    if (!ctx.first_slice && in.frames % g != 0) {
      throw ModelError(where + "slice " + std::to_string(ctx.slice_index) + " has " +
                       std::to_string(in.frames) + " frames; later slices need a multiple of " +
                       std::to_string(g));
    }
  }
  if (ctx.halo && net_->task() != Task::kDecode) {
    throw ModelError(where + "sequence parallelism is for decoding only");
  }
  const bool follower = ctx.halo && !ctx.halo_rows && ctx.halo->history_from() >= 0;
  if (!ctx.first_slice && !tiles_.count(ctx.tile_index) && !follower) {
    throw ModelError(where + "slice " + std::to_string(ctx.slice_index) + " of tile " +
                     std::to_string(ctx.tile_index) +
                     " is not the first slice, but no earlier slice of it ran on this session");
  }
}

Planar Wan21Session::run(Planar&& input, const RunContext& ctx) {
  check(input, ctx);
  // A time-split rank that takes its histories from another rank (every rank after the first,
  // and rank 0 after a slice whose last rank handed its own on) starts empty; a rank that keeps
  // its own, and a spatial-parallel rank (its band's state), go on from the last slice.
  const bool rows = ctx.halo && ctx.halo_rows;
  const bool follower = ctx.halo && !rows && ctx.halo->history_from() >= 0;
  if (ctx.first_slice || follower) tiles_[ctx.tile_index] = SequenceState{};
  SequenceState& state = tiles_[ctx.tile_index];
  context_ = ctx.device;
  halo_ = ctx.halo;
  rows_ = rows;
  state.context = ctx.device;
  state.halo = rows ? nullptr : ctx.halo;
  state.row_halo = rows ? ctx.halo : nullptr;
  try {
    Planar out = guarded(traits_.name.c_str(), [&] {
      c10::InferenceMode inference;
      // One device and every rank of a split slice: the same path.
      if (device_.is_cuda() && net_->task() == Task::kDecode && context_) {
        return run_cuda_decode(std::move(input), ctx);
      }
      return to_slice_output(
          to_planar(net_->forward(upload(std::move(input)), state, ctx.first_slice)), ctx);
    });
    state.context = nullptr;
    state.halo = nullptr;
    state.row_halo = nullptr;
    return out;
  } catch (...) {
    tiles_.erase(ctx.tile_index);  // half-updated state must not feed a later slice
    plans_.erase(ctx.tile_index);
    throw;
  }
}

// State tensors: per tile k, "tile<k>.meta" (I64: slot count, tail grid rows and columns, tail
// tiles, tail slots per tile, then the tail plan when there is one: frames, rows, cols,
// host_state, in_h, in_w), "tile<k>.slot<i>" for each defined slot and "tile<k>.tail<m>.<j>" for
// each defined slot of tail tile m (on the host between slices when the plan says host_state).
bool Wan21Session::export_state(std::vector<StateTensor>& out) const {
  return guarded((traits_.name + ": saving the causal state").c_str(), [&] {
#ifdef WMBATCH_WITH_CUDA
    // Tail state written back to pinned host memory on a copy stream must have landed.
    if (device_.is_cuda()) c10::cuda::device_synchronize();
#endif
    std::vector<StateTensor> all;
    for (const auto& [k, state] : tiles_) {
      const std::string tile = "tile" + std::to_string(k) + ".";
      std::vector<int64_t> meta = {
          int64_t(state.slots.size()), state.tail_rows, state.tail_cols,
          int64_t(state.tail_tiles.size()),
          state.tail_tiles.empty() ? 0 : int64_t(state.tail_tiles[0].size())};
      if (auto it = plans_.find(k); it != plans_.end()) {
        const TailPlan& p = it->second;
        meta.insert(meta.end(), {p.frames, p.rows, p.cols, p.host_state ? 1 : 0, p.in_h, p.in_w});
      }
      at::Tensor m = at::empty({int64_t(meta.size())}, at::kLong);
      std::memcpy(m.data_ptr<int64_t>(), meta.data(), meta.size() * sizeof(int64_t));
      all.push_back(export_tensor(tile + "meta", m));
      for (size_t i = 0; i < state.slots.size(); ++i) {
        if (state.slots[i].defined()) {
          all.push_back(export_tensor(tile + "slot" + std::to_string(i), state.slots[i]));
        }
      }
      for (size_t t = 0; t < state.tail_tiles.size(); ++t) {
        for (size_t j = 0; j < state.tail_tiles[t].size(); ++j) {
          if (!state.tail_tiles[t][j].defined()) continue;
          all.push_back(export_tensor(tile + "tail" + std::to_string(t) + "." + std::to_string(j),
                                      state.tail_tiles[t][j]));
        }
      }
    }
    out.insert(out.end(), std::make_move_iterator(all.begin()), std::make_move_iterator(all.end()));
    return true;
  });
}

bool Wan21Session::import_state(const std::vector<StateTensor>& in) {
  return guarded((traits_.name + ": loading the causal state").c_str(), [&] {
    std::map<int, SequenceState> tiles;
    std::map<int, TailPlan> plans;
    // Parses "<prefix><number><rest>"; false when `name` does not start so.
    auto number_after = [](const std::string& name, size_t& at, int64_t& value) {
      size_t end = at;
      while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
      if (end == at || end - at > 9) return false;
      value = std::stoll(name.substr(at, end - at));
      at = end;
      return true;
    };
    // Metas first: they size the slots.
    for (const StateTensor& s : in) {
      size_t at = 4;
      int64_t k = 0;
      if (s.name.rfind("tile", 0) != 0 || !number_after(s.name, at, k)) return false;
      if (s.name.compare(at, std::string::npos, ".meta") != 0) continue;
      if (s.dtype != "I64" || s.shape.size() != 1 || (s.shape[0] != 5 && s.shape[0] != 11) ||
          s.bytes.size() != size_t(s.shape[0]) * 8) {
        return false;
      }
      std::vector<int64_t> m(size_t(s.shape[0]));
      std::memcpy(m.data(), s.bytes.data(), s.bytes.size());
      if (m[0] < 0 || m[0] > 100000 || m[3] < 0 || m[3] > 100000 || m[4] < 0 || m[4] > 100000) {
        return false;
      }
      SequenceState& state = tiles[int(k)];
      state.slots.resize(size_t(m[0]));
      state.tail_rows = int(m[1]);
      state.tail_cols = int(m[2]);
      state.tail_tiles.assign(size_t(m[3]), std::vector<at::Tensor>(size_t(m[4])));
      if (m.size() == 11) {
        plans[int(k)] = TailPlan{m[5], int(m[6]), int(m[7]), m[8] != 0, m[9], m[10]};
      }
    }
    for (const StateTensor& s : in) {
      size_t at = 4;
      int64_t k = 0, i = 0, j = 0;
      number_after(s.name, at, k);
      auto it = tiles.find(int(k));
      if (it == tiles.end()) return false;
      SequenceState& state = it->second;
      const std::string rest = s.name.substr(at);
      if (rest == ".meta") continue;
      at = 0;
      if (rest.rfind(".slot", 0) == 0) {
        at = 5;
        if (!number_after(rest, at, i) || at != rest.size() || i >= int64_t(state.slots.size())) {
          return false;
        }
        state.slots[size_t(i)] = import_tensor(s, device_);
        if (!state.slots[size_t(i)].defined()) return false;
      } else if (rest.rfind(".tail", 0) == 0) {
        at = 5;
        if (!number_after(rest, at, i) || at >= rest.size() || rest[at] != '.') return false;
        ++at;
        if (!number_after(rest, at, j) || at != rest.size() ||
            i >= int64_t(state.tail_tiles.size()) ||
            j >= int64_t(state.tail_tiles[size_t(i)].size())) {
          return false;
        }
        auto plan = plans.find(int(k));
        const bool host = plan != plans.end() && plan->second.host_state;
        at::Tensor t = import_tensor(s, host ? at::Device(at::kCPU) : device_);
        if (!t.defined()) return false;
        state.tail_tiles[size_t(i)][size_t(j)] = t;
      } else {
        return false;
      }
    }
    if (tiles.empty()) return false;
    tiles_ = std::move(tiles);
    plans_ = std::move(plans);
    return true;
  });
}

at::Tensor Wan21Session::upload(Planar&& input) {
  if (!device_.is_cuda()) {
    return to_tensor(std::move(input)).to(dtype_).contiguous(net_->memory_format());
  }
  if (!context_) {
    return to_tensor(std::move(input)).to(device_, dtype_).contiguous(net_->memory_format());
  }
  const at::Tensor staged = context_->input_stager(pinned_pool_bytes_).upload(input, device_);
  at::Tensor x = at::empty(staged.sizes(),
                           staged.options().dtype(dtype_).memory_format(net_->memory_format()));
  x.copy_(staged);
  return x;
}

#ifdef WMBATCH_WITH_CUDA
// A time split's rank's tail plan, kept per (tile, frames) (exec::rank_keeps_plan) while a fresh
// one keeps its grid and the rule holds for its chunk length.
TailPlan Wan21Session::steady_rank_plan(int tile, int64_t frames, const TailPlan& fresh) {
  auto chunk = [frames](const TailPlan& p) {
    return p.frames > 0 ? std::min(p.frames, frames) : frames;
  };
  auto [it, added] = rank_plans_.try_emplace({tile, frames}, fresh);
  const TailPlan& kept = it->second;
  if (!added && (kept.rows != fresh.rows || kept.cols != fresh.cols ||
                 kept.host_state != fresh.host_state || kept.in_h != fresh.in_h ||
                 kept.in_w != fresh.in_w || !exec::rank_keeps_plan(chunk(kept), chunk(fresh)))) {
    it->second = fresh;
  }
  return it->second;
}
#endif

Planar Wan21Session::run_cuda_decode(Planar&& input, const RunContext& ctx) {
#ifndef WMBATCH_WITH_CUDA
  (void)input;
  (void)ctx;
  throw ModelError(traits_.name + ": this build has no CUDA");
#else
  const int tile = ctx.tile_index;
  const bool first = ctx.first_slice;
  // A rank that writes into the split slice's output may return before its last copies land;
  // one that returns its part, not.
  std::function<Planar()>* deferred = halo_ && !ctx.into ? nullptr : ctx.deferred;
  const c10::DeviceIndex index = device_.index();
  c10::cuda::CUDAGuard device_guard(index);
  exec::OutputSink& sink = context_->output_sink(pinned_pool_bytes_);
  SequenceState& state = tiles_[tile];
  if (first) plans_.erase(tile);

  const at::Tensor x = upload(std::move(input));
  // Output frames of `n` latent frames (the sequence's first frame passes through alone).
  const int64_t tf = temporal_factor_;
  auto decoded = [tf](int64_t n, bool starts) { return starts ? 1 + tf * (n - 1) : tf * n; };
  const int64_t total = decoded(x.size(2), first);
  const int64_t out_h = x.size(3) * traits_.scale_num, out_w = x.size(4) * traits_.scale_num;
  // Where the chunks go: the slice's output, made (zero-filled) on the offload's thread while
  // the device runs the layers before the tail (made on this thread, it held back the queueing
  // of the tail: 480p decode measured 12 % slower; asked for at the first chunk, the copies of
  // the tail's first chunks waited for it, and so did the device, in push()); or, for a rank of
  // a split slice, the whole slice's output, which the session made. Deferred, the copier may
  // still write there after this returns: it lives on the heap (or with the session).
  const auto holder = std::make_shared<Planar>();
  Planar* out = holder.get();
  int64_t frame_base = 0, row_base = 0;
  if (ctx.into) {
    out = ctx.into;
    frame_base = ctx.into_frame;
    row_base = ctx.into_row;
    if (out->channels != traits_.out_channels || out->width != out_w ||
        frame_base + total > out->frames || row_base + out_h > out->height) {
      throw ModelError(traits_.name + ": a rank's part does not fit the slice's output");
    }
    if (ctx.into_ready.valid()) sink.wait(ctx.into_ready);
  } else {
    sink.allocate(*out, traits_.out_channels, int(total), int(out_h), int(out_w));
  }
  // The memory the tail may plan with: the budget (or what the device could give us), this
  // rank's share of it when ranks share the device, less what is allocated now (the weights,
  // the state before the tail, the tail input: it stays) and a margin for cuDNN's workspaces
  // and the allocator's fragmentation (measured ~1 GiB at 12 GiB).
  auto tail_avail = [&] {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    const int64_t allocated = stats.allocated_bytes[0].current;
    const int64_t cap = context_->device_memory_cap();
    const int64_t share = std::max(1, ctx.device_ranks);
    return std::max<int64_t>((cap - allocated - cap / 10) / share - (int64_t(768) << 20), 1);
  };
  auto log_plan = [&](const TailPlan& plan, int64_t avail, int64_t frames) {
    if (plan.tiles() == 1 && !plan.host_state && (plan.frames == 0 || plan.frames >= frames))
      return;
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", double(avail) / double(1 << 30));
    log::info(kLogger, traits_.name + ": " + gib + " GiB for the decode tail" +
                           (halo_ ? " (a rank's share)" : "") + ": " + plan.str());
  };
  // The tail plan, made when the tail of the sequence's first slice starts.
  bool tail_reached = false;  // in this attempt
  auto planner = [&](const at::Tensor& tail_in) {
    tail_reached = true;
    const int64_t frames = tail_in.size(2), h = tail_in.size(3), w = tail_in.size(4);
    if (halo_ && halo_->ranks() > 1) {
      // Ranks of a split slice: rank 0 plans (for a time split the tile grid, for the longest
      // part: one latent frame more than its own; for a row split the chunk frames, which
      // every band must share to exchange rows in step) and passes it along the ranks.
      const int r = halo_->rank(), n = halo_->ranks();
      const wan21::TailRank use = rows_ ? wan21::TailRank::kRows : wan21::TailRank::kTime;
      TailPlan plan;
      if (r == 0) {
        auto it = plans_.find(tile);
        const bool fresh = it == plans_.end();
        if (fresh) {
          const int64_t most = rows_ ? frames : frames + tf;
          it = plans_.insert_or_assign(tile, net_->auto_tail_plan(most, h, w, tail_avail(), use))
                   .first;
        }
        plan = it->second;
        // A time split's rank sizes its own chunks for the grid (they are its business).
        if (!rows_) {
          const int64_t avail = tail_avail();
          plan = steady_rank_plan(
              tile, frames, net_->auto_tail_plan(frames, h, w, avail, use, plan.rows, plan.cols));
          if (fresh) log_plan(plan, avail, frames);
        } else if (fresh) {
          log_plan(plan, tail_avail(), frames);
        }
        // Host to host: through the device, reading it back waited for this rank's stream.
        halo_->send_values(1, {plan.rows, plan.cols, plan.frames});
      } else {
        const std::vector<int64_t> m = halo_->recv_values(r - 1);
        if (r + 1 < n) halo_->send_values(r + 1, m);
        if (m.size() != 3) throw ModelError(traits_.name + ": a malformed tail plan from a rank");
        plan = TailPlan{m[2], int(m[0]), int(m[1]), false, h, w};
        // A time split's rank sizes its own chunks for the grid (they are its business).
        if (!rows_) {
          plan = steady_rank_plan(
              tile, frames,
              net_->auto_tail_plan(frames, h, w, tail_avail(), use, plan.rows, plan.cols));
        }
      }
      return plan;
    }
    if (halo_) {
      // A rank with whole slices in turn: the tail's causal state comes tile by tile from the
      // rank of the slice before, so every rank takes the tile grid of the sequence's first
      // slice (passed along the ring with the state; ranks plan from their own free memory,
      // which differs, and three grids among four ranks at 1080p failed on a message's size).
      // Its chunks are its own. It plans as one device would (its state in host memory where
      // that fits better, on paper: the network keeps a rank's state on the device, since it
      // passes to the next rank): counting the state on the device (stop 47) took 2x2 and 2x3
      // grids at 1080p with four ranks, 0.54x of one rank, against 1x2 and 0.994x (stop 48).
      const int from = halo_->history_from(), to = halo_->history_to();
      int rows = 0, cols = 0;
      if (from >= 0) {
        const std::vector<int64_t> m = halo_->recv_values(from);
        if (m.size() != 2) throw ModelError(traits_.name + ": a malformed tail grid from a rank");
        rows = int(m[0]);
        cols = int(m[1]);
      }
      auto it = plans_.find(tile);
      const bool fresh =
          it == plans_.end() || (from >= 0 && (it->second.rows != rows || it->second.cols != cols));
      if (fresh) {
        const int64_t avail = tail_avail();
        it = plans_
                 .insert_or_assign(tile, net_->auto_tail_plan(frames, h, w, avail,
                                                              wan21::TailRank::kNone, rows, cols))
                 .first;
        log_plan(it->second, avail, frames);
      }
      if (to >= 0) halo_->send_values(to, {it->second.rows, it->second.cols});
      return it->second;
    }
    auto it = plans_.find(tile);
    if (it != plans_.end()) return it->second;
    const int64_t avail = tail_avail();
    TailPlan plan = net_->auto_tail_plan(frames, h, w, avail);
    log_plan(plan, avail, frames);
    return plans_[tile] = plan;
  };
  // Decodes latent frames `part` (the slice, or part of it) into output frames from frame0 on.
  // `last`: the slice's last part; its copies are left to land after this returns when the
  // caller takes the output deferred.
  std::function<void(const at::Tensor&, bool, int64_t, bool)> decode_part;
  decode_part = [&](const at::Tensor& part, bool part_first, int64_t frame0, bool last) {
    const SequenceState start = state;  // slots are replaced, never written: a cheap snapshot
    for (;;) {
      tail_reached = false;
      try {
        net_->forward_chunks(
            part, state, part_first, planner, [&](const at::Tensor& y, const Network::ChunkPos& p) {
              // (A retry reuses `out`: every chunk is written again.)
              if (p.height != out_h || p.width != out_w) {
                throw ModelError(traits_.name + ": decoder output " + std::to_string(p.height) +
                                 "x" + std::to_string(p.width) + ", expected " +
                                 std::to_string(out_h) + "x" + std::to_string(out_w));
              }
              // [1, C, n, h, w] (channels_last, run dtype, maybe a crop) → [C, n, h, w] float32
              at::Tensor planar = at::empty({y.size(1), y.size(2), y.size(3), y.size(4)},
                                            y.options().dtype(at::kFloat));
              planar.copy_(y.squeeze(0));
              sink.push(planar, *out, int(frame_base + frame0 + p.frame), int(row_base + p.top),
                        int(p.left));
            });
        // This part is in `out` (or marked to be): a later part's failure cannot undo it.
        if (!(last && deferred)) sink.finish();
        return;
      } catch (const c10::OutOfMemoryError&) {
        sink.abandon();
        // The other ranks of a split slice cannot retry in step with this one.
        if (halo_) throw;
        c10::cuda::device_synchronize();  // copies in flight must land before their buffers go
        state = start;
        c10::cuda::CUDACachingAllocator::emptyCache();
        // In the tail: shorter chunks down to 4 frames, then (while the tile grid may still
        // change, in the sequence's first part) more tiles, then shorter chunks still.
        auto it = plans_.find(tile);
        if (it != plans_.end() && tail_reached) {
          TailPlan& plan = it->second;
          bool shrunk = true;
          if (plan.frames > 4 || (!part_first && plan.frames > 1)) {
            plan.frames = (plan.frames + 1) / 2;
          } else if (part_first && plan.tiles() < 64) {
            const int64_t at = plan.frames;
            plan = net_->more_tiles(plan);
            plan.frames = at;
          } else if (plan.frames > 1) {
            plan.frames /= 2;
          } else {
            shrunk = false;
          }
          if (shrunk) {
            log::warn(kLogger, traits_.name +
                                   ": out of GPU memory; retrying the slice with tail plan " +
                                   plan.str());
            continue;
          }
        }
        // Before the tail (or with nothing left to shrink there): the latent frames in two
        // parts, one after the other. Exact: the causal state carries from one to the next, as
        // between slices.
        const int64_t n = part.size(2), half = n / 2;
        if (n < 2) throw;
        log::warn(kLogger, traits_.name + ": out of GPU memory; decoding " + std::to_string(n) +
                               " latent frames as " + std::to_string(half) + " + " +
                               std::to_string(n - half));
        decode_part(part.narrow(2, 0, half), part_first, frame0, false);
        decode_part(part.narrow(2, half, n - half), false, frame0 + decoded(half, part_first),
                    last);
        return;
      }
    }
  };
  const int64_t most = net_->tuning().part_latents;
  try {
    if (most > 0 && x.size(2) > most && !halo_) {
      int64_t frame0 = 0;
      for (int64_t f = 0; f < x.size(2); f += most) {
        const int64_t n = std::min(most, x.size(2) - f);
        decode_part(x.narrow(2, f, n), first && f == 0, frame0, f + n >= x.size(2));
        frame0 += decoded(n, first && f == 0);
      }
    } else {
      decode_part(x, first, 0, true);
    }
  } catch (...) {
    // Any other error (a size check in the chunk callback, a CUDA or halo error): the queued
    // allocation and chunks point into `out`, which goes away with `holder` (or the session's
    // slice) now.
    sink.abandon();
    throw;
  }
  if (deferred) {
    // The wait rethrows what the copies hit: a CUDA error there is this model's (exit 65), as
    // when sink.finish() runs inside guarded(), not an internal error (70) in the blender.
    *deferred = [take = exec::deferred_output(holder, sink.mark()), name = traits_.name] {
      return guarded(name.c_str(), take);
    };
    return Planar();
  }
  return std::move(*holder);
#endif
}

std::vector<ParamSpec> specs_for(const ModelConfig& config) {
  return wan21::layout(Architecture::from(config));
}

}  // namespace

std::unique_ptr<Model> make_wan21_vae(const ModelConfig& config, const Device& device) {
  const Task task = task_of(config);
  const std::vector<ParamSpec> specs = specs_for(config);
  ParamMap params =
      guarded("wan2.1-vae: reading weights", [&] { return load_params(config, specs, task); });
  return std::make_unique<Wan21Model>(config, task, device, std::move(params));
}

std::unique_ptr<Model> make_wan21_vae_random(const ModelConfig& config, const Device& device,
                                             uint64_t seed) {
  const Task task = task_of(config);
  ParamMap params = guarded("wan2.1-vae: random weights",
                            [&] { return random_params(specs_for(config), task, seed); });
  return std::make_unique<Wan21Model>(config, task, device, std::move(params));
}

std::vector<Wan21Param> wan21_vae_layout(const ModelConfig& config) {
  std::vector<Wan21Param> out;
  for (ParamSpec& s : specs_for(config)) {
    out.push_back({std::move(s.key), std::move(s.shape), s.task == Task::kDecode});
  }
  return out;
}

const std::vector<double>& wan21_latent_mean() { return kLatentMean; }
const std::vector<double>& wan21_latent_std() { return kLatentStd; }

}  // namespace wm::models
