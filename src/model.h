// The model interface every model implements: built-in upscalers, the Wan2.1 VAE, TorchScript.
// A Model holds what is shared (weights, once per device); a ModelSession holds per-worker state
// (causal caches). Both are torch-free at this level: input and output are Planar blocks
// [C, T, H, W] of float32 on the host. Implementations live in src/models/ and are the only
// files that include LibTorch.
//
// Threading: a Model is immutable after construction and may be shared by many sessions; a
// ModelSession is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/planar.h"

namespace wm {

namespace exec {
class DeviceContext;  // src/exec/device_context.h
class HaloExchange;   // src/exec/halo_exchange.h
}  // namespace exec

enum class Precision { kFloat32, kBFloat16, kFloat16 };
const char* to_string(Precision p);

struct Device {
  enum class Kind { kCpu, kCuda } kind = Kind::kCpu;
  int index = 0;
  std::string str() const { return kind == Kind::kCpu ? "cpu" : "cuda:" + std::to_string(index); }
};

// Options of one model kind that have no place among ModelConfig's common fields: each kind
// that has some derives its own struct in its family's torch-free header (Wan21VaeOptions,
// Seedvr2VaeOptions, Seedvr2Options, RealEsrganOptions, ScriptedOptions), its registry entry
// fills it from the `model:` map, and its model reads it back (options_as). ModelConfig holds
// only what every kind (or the scheduler) reads, so a new kind adds no field to it.
struct ModelOptions {
  virtual ~ModelOptions() = default;
  // "key value" lines of every setting, in a fixed order (fingerprints of farm jobs).
  virtual std::string text() const = 0;
};

// What a job asks of a model (filled from the job file's `model:` map after validation).
struct ModelConfig {
  std::string kind = "lanczos";  // a kind of the registry (src/models/registry.h)
  std::string task = "upscale";  // upscale | decode | encode  (what the model is used for)
  int scale = 2;                 // built-in upscalers: 2, 3 or 4
  std::string weights;           // path to weights (.safetensors, or .pt for torchscript)
  Precision precision = Precision::kFloat32;
  // Run setting (the job's `offload.pinned_mib`): the most pinned host memory each staging pool
  // of a GPU session holds (device→host outputs, host→device inputs); 0 = the model's default.
  int64_t pinned_pool_bytes = 0;
  // The kind's own options (see ModelOptions); null for kinds without any.
  std::shared_ptr<const ModelOptions> options;
  // Run setting (the job's `tiling.exact`): tiles must reproduce the untiled output, so a model
  // whose default halo is approximate declares its exact one (RRDBNet).
  bool exact_tiles = false;
  // Run setting (the job's `tiling: auto`): a model that can sizes its calls (frames per call,
  // tiles) from the device's memory budget and retries a call that runs out of memory with
  // smaller ones (realesrgan); others run whole frames.
  bool auto_tiles = false;
  // The job's `resolution:` (kinds that size their output themselves, registry ModelKind::
  // resolution): one number, the output's short side; two, [height, width] of SeedVR2's official
  // area rule. Empty: not given.
  std::vector<int> resolution;
  // The kind's execution choices, "key=value,..." (the job's `model.tuning`, wmbench --tuning;
  // each kind parses its own: wan21::Tuning, seedvr2::Tuning, RealEsrganTuning): they change
  // speed and rounding only, never the function computed. Empty: the defaults.
  std::string tuning;
};

// The kind's options as T: config.options when it holds a T, else T's defaults (a config built
// by hand with none).
template <class T>
const T& options_as(const ModelConfig& config) {
  static const T defaults;
  const T* own = dynamic_cast<const T*>(config.options.get());
  return own ? *own : defaults;
}

// The kind's options as T, to change (tests, benchmarks): config.options itself when it holds a
// T that no other config shares, else a copy of them (or of T's defaults) put in its place, so a
// config copied before never sees the change.
template <class T>
T& edit_options(ModelConfig& config) {
  const T* own = dynamic_cast<const T*>(config.options.get());
  // Every options struct is made non-const (make_shared<T>) and only ever handed out as const.
  if (own && config.options.use_count() == 1) return const_cast<T&>(*own);
  auto fresh = std::make_shared<T>(options_as<T>(config));
  T& out = *fresh;
  config.options = std::move(fresh);
  return out;
}

// What splitting one slice over ranks costs (parallel/scaling_model.h: auto's choice between a
// time split and a row split), per unit of the slice's input; 0 where a model does not say.
struct SplitCosts {
  double flops_per_pixel = 0;  // per output pixel (2 per multiply-add)
  int temporal_factor = 1;     // output frames per input frame (a sequence's first: 1)
  int spatial_factor = 1;      // output pixels per input pixel, per side
  // A time split: bytes of causal history a rank passes on per slice, per input pixel.
  double state_bytes_per_pixel = 0;
  // A row split: bytes a band passes to one neighbour per slice, per input column and input
  // frame; and its messages to one neighbour per slice.
  double row_bytes_per_column = 0;
  double row_messages = 0;
};

// Facts a model declares; the scheduler plans tiles and slices from them.
struct ModelTraits {
  std::string name;
  int in_channels = 3;
  int out_channels = 3;
  // Output spatial size = input size * scale_num / scale_den (VAE decode 8/1, encode 1/8).
  int scale_num = 1;
  int scale_den = 1;
  // Input height and width must be multiples of this (VAE encode: 8). 1 = any size.
  int size_multiple = 1;
  // Spatial halo in input pixels a tile needs on each side. When `halo_exact`, a tile given this
  // halo computes exactly the untiled values in its core; otherwise the halo is a recommended
  // overlap and tiles are approximate (blended).
  int halo = 0;
  bool halo_exact = true;
  // True when the model carries state across temporal slices: slices of one video must then be
  // run in order on one session (per tile), starting with the slice that holds frame 0.
  bool causal_state = false;
  // Valid input frame counts are `frame_offset + frame_group * k` (Wan encode: 1 + 4k; others
  // 1+1k).
  int frame_group = 1;
  int frame_offset = 0;
  std::vector<Precision> precisions = {Precision::kFloat32};
  // > 0: the model resizes every frame so that its short side is this many pixels (output =
  // input × target / short side, each side floored) instead of scale_num / scale_den.
  int target_short_side = 0;
  // > 0: the model's own slice length (new frames per slice) when the job leaves slice_frames at
  // 0 (SeedVR2: a temporal batch less its overlap).
  int slice_frames = 0;
  // > 0: each slice after the first also holds the last `slice_overlap` frames of the one before
  // (context: RunContext::first_frame counts them); the scheduler cross-fades the two outputs of
  // those frames. Slices are then independent of each other (no causal state needed).
  int slice_overlap = 0;
  // The model can run one slice as several ranks that split its frames in time, exchanging
  // causal history through RunContext::halo (parallel/sequence_parallel.h).
  bool sequence_parallel = false;
  // The model can run one slice as several ranks that each take the whole slice and compute
  // their own part of it inside (the SeedVR2 upscaler: runs of latent frames through its VAE,
  // whole windows through its DiT), exchanging through RunContext::halo (a ring r − 1 → r within
  // the slice, and messages between any two ranks); each rank returns its run of the output
  // frames, in rank order. Slices stay independent of each other.
  bool split_inside_slices = false;
  // The model can run one slice as several ranks that each take a band of rows of every frame
  // (spatial parallelism), exchanging boundary rows before every spatial convolution through
  // RunContext::halo with RunContext::halo_rows set (docs/gpu.md).
  bool spatial_parallel = false;
  // The model takes RGB frames already on its device and returns them there
  // (exec::DeviceFrameModel): video jobs on a GPU may then keep frames on the device between
  // decoding and encoding (parallel/frame_path.h).
  bool device_frames = false;
  // What those splits cost (auto's choice between them).
  SplitCosts split_costs;
};

// Where a block sits in its video; stateful sessions key their caches by tile_index.
struct RunContext {
  int64_t slice_index = 0;
  bool first_slice = true;  // the slice holds sequence frame 0
  bool last_slice = true;
  int tile_index = 0;
  int tiles = 1;
  int padded_frames = 0;    // trailing input frames that repeat the last real one (not real)
  int64_t first_frame = 0;  // the source index of the slice's first frame
  // The device worker running this call (src/exec/device_context.h): its streams, pinned
  // staging, memory budget. nullptr when the caller runs the session directly (CPU models need
  // none; a CUDA session then computes on the current stream with plain copies where it can).
  exec::DeviceContext* device = nullptr;
  // Sequence parallelism (src/exec/halo_exchange.h): this run is rank halo->rank() of a slice
  // split in time; first_slice is set on rank 0 only. nullptr: the whole slice.
  exec::HaloExchange* halo = nullptr;
  // With `halo`: the ranks split the slice by rows, not in time (spatial parallelism): this run
  // holds every frame of a band of the input's rows (rank order = top to bottom), first_slice
  // is set on every rank, and each rank keeps its band's causal state.
  bool halo_rows = false;
  // Where the caller takes a slice's output later: a session that can may return an empty
  // Planar at once, while the slice's last chunks still copy to the host, and put here a
  // function that waits for them and returns the output (call it once, from any thread, before
  // the next slice of the same tile needs it... or never: dropping it waits too). The device
  // then starts the next slice while the last one lands. Sessions that cannot leave it empty.
  std::function<Planar()>* deferred = nullptr;
  // A rank of a split slice (halo set): where its part of the slice's output goes. The session
  // that split the slice made the whole output; the rank writes its frames from `into_frame` and
  // its rows from `into_row` of `*into` (no gather copy) and returns an empty Planar (with
  // `deferred`, its last copies may still be landing: the function then returns an empty
  // Planar). Null: the rank returns its part.
  Planar* into = nullptr;
  int into_frame = 0;
  int into_row = 0;
  // Valid: `*into`'s sizes are set but its memory is made beside the ranks' work (zero-filling
  // a 720p slice's output took ~180 ms of host time before any rank could start); write into it
  // only once this is ready (OutputSink::wait, or get() on the writing thread). Sizes may be
  // read at once.
  std::shared_future<void> into_ready;
  // Ranks of this run that share this device: each plans its memory with 1/device_ranks of it.
  int device_ranks = 1;
};

// One tensor of a session's causal state, torch-free: its bytes as the session holds them
// (dtype as it is: "F32", "BF16", "F16", "I64"; logical row-major order), for snapshots saved
// between farm chunks (scheduler/causal_state.h). `channels_last`: the session keeps it in
// channels-last-3d memory order (restored so on import, so the next slice computes the same bits).
struct StateTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  bool channels_last = false;
};

class ModelSession {
 public:
  virtual ~ModelSession() = default;
  // Consumes `input` [in_channels, T, H, W] and returns [out_channels, T', H', W'] with
  // T' = Model::output_frames(T) for a whole sequence, or the part of it this slice yields.
  // Throws ModelError on failure.
  virtual Planar run(Planar&& input, const RunContext& ctx) = 0;
  // The causal state after the last slice run (every tile's), copied to the host: `out` gets the
  // tensors; false when the session cannot (then nothing is added). Call between slices, on the
  // thread (device worker) the session runs on. Throws ModelError on a device failure.
  virtual bool export_state(std::vector<StateTensor>& out) const {
    (void)out;
    return false;
  }
  // Replaces the session's state with one export_state() made (by a session of the same model
  // and settings): the next slice then continues that sequence (run it with first_slice false).
  // False (state unchanged) when the session cannot or the tensors do not fit it.
  virtual bool import_state(const std::vector<StateTensor>& in) {
    (void)in;
    return false;
  }
  // A time split (parallel/sequence_parallel.h): whether this session, as a rank that shares
  // its device with device_ranks − 1 other ranks, holds its causal state for slices of
  // height × width input on the device (`device`: its worker's context). A rank's histories pass
  // to the next rank as device tensors, so it cannot park them in host memory as one device
  // does. False: the split runs the sequence on one rank alone, as one device. Call between
  // slices, with none in flight on this session.
  virtual bool rank_holds_state(int height, int width, int device_ranks,
                                exec::DeviceContext* device) const {
    (void)height, (void)width, (void)device_ranks, (void)device;
    return true;
  }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelTraits& traits() const = 0;
  // Output frames for an input of `frames` frames given as one whole sequence.
  virtual int64_t output_frames(int64_t frames) const { return frames; }
  // A fresh per-worker state on `device`.
  virtual std::unique_ptr<ModelSession> open_session(const Device& device) const = 0;
};

// Builds the model a config names. Throws ModelError (bad weights, bad config) or ConfigError.
std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device);

}  // namespace wm
