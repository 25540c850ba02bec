// Wan2.1 VAE building blocks and the two networks (decoder, encoder), in the exact
// whole-sequence formulation of ../shared/wan21-vae-spec.md: every op runs on all frames of a
// slice at once; causal state between slices lives in a SequenceState.
//
// Internal to src/models/ (wan21_vae.cpp and tests); the public entry points are in wan21_vae.h.
// A Network is immutable after construction and may be shared by sessions on its device; a
// SequenceState belongs to one sequence (one tile of one video) and one thread at a time.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/exec/device_context.h"
#include "src/model.h"

namespace wm::exec {
class DeviceContext;
class HaloExchange;
}  // namespace wm::exec

namespace wm::models::wan21 {

enum class Task { kDecode, kEncode };

// Where parameters come from while a network is built: a weights file, random numbers, another
// network's tensors, or nothing (layout recording returns undefined tensors).
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // The parameter `key`, expected to have `shape`, already on the run device and dtype.
  virtual at::Tensor get(const std::string& key, const std::vector<int64_t>& shape) = 0;
};

// Causal state of one sequence: per stateful layer (slot), the input frames it keeps. Slot
// tensors are replaced, never written in place, so a copy of a SequenceState is a snapshot.
struct TailArena;  // device buffers for tail state kept in host memory (wan21_blocks.cpp)
struct TailTile;

struct SequenceState {
  std::vector<at::Tensor> slots;  // undefined: sequence start (zeros / nothing seen)
  // Causal layers copy their new state into their defined slot instead of replacing it (the
  // slots are views into a TailArena).
  bool write_in_place = false;
  // Decode tail run in spatial tiles (TailPlan): the tail slots of each tile (on the device, or
  // in pinned host memory between slices when TailPlan::host_state), and the grid they belong to.
  std::vector<std::vector<at::Tensor>> tail_tiles;
  int tail_rows = 0, tail_cols = 0;
  // Made at the first host_state slice and kept for the sequence; contents are scratch (a
  // snapshot of the state may share it).
  std::shared_ptr<TailArena> tail_arena;
  // For the call in progress (set by the session, not part of the state): the device worker
  // (side streams for the tail arena's copies) and, in a sequence-parallel run, the halo
  // exchange: every causal layer then takes its history from the previous rank (rank 0: from
  // these slots) and hands its new history to the next rank.
  exec::DeviceContext* context = nullptr;
  exec::HaloExchange* halo = nullptr;
  // With `halo`, for the call in progress: per slot, whether the layer took its history already
  // (a layer run in frame chunks takes it before its first chunk only), and whether the frames
  // now running end this rank's part (the layers then hand their new history on, and drop it:
  // the next slice's comes from the rank before). Network::forward_chunks keeps them.
  std::vector<char> received;
  bool sends = true;
  // Spatial parallelism (decode; set instead of `halo`): this sequence is a band of rows of
  // every frame (rank order = top to bottom). Every conv with a 3×3 spatial kernel first
  // exchanges its input's boundary rows (history frames included) with the ranks above and
  // below and pads with them; the attention gathers every rank's tokens. The slots hold this
  // band's history only; the tail runs as one tile.
  exec::HaloExchange* row_halo = nullptr;
};

// How the decode tail (the layers after the last temporal upsample: 3×3 convs and per-pixel
// ops only) runs. Its output equals the untiled, unchunked computation up to rounding: tiles
// overlap by the tail's receptive field (Network::tail_halo) and keep their own causal state.
struct TailPlan {
  int64_t frames = 0;      // frames per chunk (0: all)
  int rows = 1, cols = 1;  // spatial tiles, over the tail input
  // CUDA: the tiles' causal state lives in pinned host memory between slices; each tile's is
  // uploaded (the next tile's while the current one computes) and written back on a copy stream.
  bool host_state = false;
  int64_t in_h = 0, in_w = 0;  // the tail input size it was made for
  int tiles() const { return rows * cols; }
  std::string str() const;
};

// How a rank of a split slice runs the decode tail (Network::auto_tail_plan): a time split's
// rank wants whole frames, in more tiles if need be (a chunked layer hands its history on only
// after its last chunk, which holds the next rank back), its state on the device (it passes to
// the next rank); a row split's band is one tile, its state on the device.
enum class TailRank { kNone, kTime, kRows };

// The architecture a config describes; validates the config (ModelError on nonsense).
struct Architecture {
  int dim = 96;
  int z_dim = 16;
  std::vector<int> dim_mult;
  int num_res_blocks = 2;
  std::vector<bool> temporal_down;  // encoder order; the decoder uses it reversed
  int spatial_factor = 8;           // 2^(stages-1)
  int temporal_factor = 4;          // 2^(number of temporal resamples)
  static Architecture from(const ModelConfig& config);
};

// Execution choices that do not change the function computed (only rounding). Defaults are the
// measured-fastest (docs/gpu.md); ModelConfig::tuning = "key=value,..." (the job's model.tuning,
// wmbench --tuning) overrides them for A/B measurements (keys as the member names; booleans 0/1).
struct Tuning {
  bool fused = true;     // CUDA: fused RMSNorm(+bias +residual)+SiLU kernels
  bool raw_conv = true;  // CUDA: cuDNN convs written in place, bias folded into the next kernel
  bool subpixel = true;  // upsample: 2×2 sub-pixel convs on the source instead of nearest + 3×3
  int conv_frames = 0;   // CUDA: output frames per conv call (0: auto ≤ 16, -1: all)
  int tail_frames = 0;   // decode: frames per chunk after the last temporal upsample (0: auto)
  int64_t tail_budget_mib = 0;       // auto tail plan: memory budget (0: what the device has free)
  int tail_rows = 0, tail_cols = 0;  // decode tail tiles (0: auto)
  int host_state = -1;               // tail state in host memory: 0 no, 1 yes, -1 auto
  // CUDA half precision attention as two GEMMs with float32 scores: 0 no, 1 yes, -1 auto
  // (heads wider than the fused SDPA kernels take, i.e. Wan2.1's 384)
  int gemm_attention = -1;
  // decode: frames per call of an upsample's time conv (0: auto, 4 when the slice's output
  // would pass 1 GiB, else all)
  int time_conv_frames = 0;
  int norm_threads = 0;  // CUDA: threads per pixel in the fused norm kernels (0: auto)
  // CUDA decode: latent frames per pass within a slice (0: the whole slice; out of memory
  // before the tail halves a pass, down to one latent frame)
  int part_latents = 0;
  // decode tail tiles: each layer computes only the part of the tile's crop that later layers
  // read (the halo shrinks layer by layer) instead of the whole crop
  bool tile_shrink = true;
  bool cudnn_benchmark = true;  // CUDA: let cuDNN time its algorithms per shape
  // CUDA: candidate plans cuDNN's search times per shape (0: LibTorch's 10)
  int cudnn_benchmark_limit = exec::kCudnnSearchPlans;
  // The defaults, then "key=value,..." overrides; ModelError names an unknown key or bad value.
  static Tuning parse(const std::string& text);
  std::string str() const;
};

// Per-stage timings (a debugging aid; synchronises the device around every block and conv, so
// it slows decoding slightly). Process-wide, for one thread at a time.
struct StageTime {
  std::string name;
  double ms = 0;        // whole block
  double conv_ms = 0;   // inside conv calls
  double flops = 0;     // conv FLOPs (2 per multiply-add)
  double peak_mib = 0;  // CUDA: most memory allocated while the block ran
  int64_t calls = 0;
};
void set_profiling(bool on);
// The timings gathered since the last call, in first-seen order; resets them.
std::vector<StageTime> take_profile();

class Block;

class Network {
 public:
  // Builds the decoder (decoder.*, conv2.*) or the encoder (encoder.*, conv1.*), pulling every
  // parameter from `params` in checkpoint order. `mean`/`std` are the z_dim latent statistics.
  Network(const Architecture& arch, Task task, ParamSource& params, const at::Tensor& mean,
          const at::Tensor& std, at::MemoryFormat memory_format, Tuning tuning = Tuning());
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // x: [1, C_in, T, H, W] on the network's device/dtype. `first`: x starts at sequence frame 0
  // (the state must then be fresh). Frame counts are the caller's to validate (see wan21_vae.h).
  at::Tensor forward(at::Tensor x, SequenceState& state, bool first) const;
  // The same computation, handing the output to `sink` in consecutive frame chunks (decode: the
  // layers after the last temporal upsample run chunk by chunk, `tail_frames` frames at a time,
  // bounding their memory; 0 = tuning/auto). Each chunk is [1, C_out, n, H, W] and may be
  // overwritten after sink returns. Encode hands over one chunk.
  // Where a chunk goes: output frames [frame, +n) of `frames`, rows [top, +h) and columns
  // [left, +w) of the height×width output.
  struct ChunkPos {
    int64_t frame = 0, frames = 0, top = 0, left = 0, height = 0, width = 0;
  };
  using Sink = std::function<void(const at::Tensor& chunk, const ChunkPos& pos)>;
  // `plan` returns how to run the tail, given the tail input [1, C, T, h, w] (called once per
  // call, after the layers before the tail ran; the tile grid must stay the same for a sequence).
  using Planner = std::function<TailPlan(const at::Tensor& tail_input)>;
  void forward_chunks(at::Tensor x, SequenceState& state, bool first, const Planner& plan,
                      const Sink& sink) const;
  // The tail plan for a tail input of `frames` frames of h×w (tail-input pixels) when `avail`
  // bytes may be used by the tail (its activations, and its causal state when it stays on the
  // device); tuning overrides apply. avail <= 0: no limit (one tile, all frames). `rank`: for a
  // rank of a split slice (TailRank). `rows` × `cols` > 0: that grid (chunk frames only).
  TailPlan auto_tail_plan(int64_t frames, int64_t h, int64_t w, int64_t avail,
                          TailRank rank = TailRank::kNone, int rows = 0, int cols = 0) const;
  // The next grid auto_tail_plan would try after `plan`'s (more tiles), state in host memory
  // on CUDA; frames unchanged.
  TailPlan more_tiles(const TailPlan& plan) const;
  // The estimate auto_tail_plan works with: device bytes the tail needs beyond what is allocated
  // when it starts (causal state, activations of a chunk).
  int64_t tail_plan_bytes(const TailPlan& plan, int64_t frames, int64_t h, int64_t w) const;
  // Receptive field of the tail in tail-input pixels: a tile given this much overlap computes
  // exactly the untiled values in its core.
  int64_t tail_halo() const { return tail_halo_; }
  // Output pixels per tail-input pixel (per side).
  int64_t tail_scale() const { return tail_scale_; }
  const Tuning& tuning() const { return tuning_; }
  Task task() const { return task_; }
  int state_slots() const { return slots_; }
  at::MemoryFormat memory_format() const { return memory_format_; }

 private:
  Task task_;
  at::MemoryFormat memory_format_;
  Tuning tuning_;
  int slots_ = 0;
  size_t tail_start_ = 0;      // decode: first block after the last temporal upsample
  int64_t tail_channels_ = 0;  // decode: widest channel count at full output resolution
  int64_t tail_halo_ = 0, tail_scale_ = 1;
  int64_t tail_in_channels_ = 0;  // decode: channels of the tail's input
  // Per tail block (index i − tail_start_): its input's resolution in tail-input pixels, and the
  // halo its input needs for the tail's output to be exact.
  std::vector<int64_t> tail_block_scales_, tail_block_halos_;
  struct TailSlot {
    int slot;  // index into SequenceState::slots
    int64_t channels;
    size_t block;  // its tail block (index i − tail_start_); the state covers that block's region
  };
  std::vector<TailSlot> tail_slots_;  // the tail's causal layers
  at::Tensor mean_, std_;             // [1, z, 1, 1, 1]
  at::Tensor top_weight_, top_bias_;  // conv2 (decode) or conv1[:z] (encode), 1×1×1
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<std::string> block_names_;  // for per-stage timings

  at::Tensor run_block(size_t i, at::Tensor x, SequenceState& state, bool first) const;
  // The tail over one tile, chunk by chunk (state in `tile`), into `sink`.
  void run_tail_tile(const at::Tensor& x, const TailTile& t, int64_t step, SequenceState& tile,
                     bool first, ChunkPos pos, const Sink& sink) const;
  // [1, C, 2, h, w] of tail slot j for tile t.
  std::vector<int64_t> tail_slot_sizes(const TailTile& t, size_t j) const;
  int64_t tail_slot_numel(const TailTile& t, size_t j) const;
  // The tiles of a rows × cols grid over an h × w tail input, each with the region every tail
  // block reads (Tuning::tile_shrink), and the grids to try, fewest tiles and least overlap first.
  std::vector<TailTile> tail_tiles(int64_t h, int64_t w, int rows, int cols) const;
  std::vector<std::pair<int, int>> tail_grids(int64_t h, int64_t w) const;
  // The sequence's arena, its buffers large enough for `tiles` in `options`' dtype and device.
  TailArena& tail_arena(SequenceState& state, const std::vector<TailTile>& tiles,
                        const at::TensorOptions& options) const;
};

// The full checkpoint layout (encoder, then top-level conv1, conv2, then decoder) for a config:
// key and shape of every parameter, in the official order.
struct ParamSpec {
  std::string key;
  std::vector<int64_t> shape;
  Task task;  // the network that uses it
};
std::vector<ParamSpec> layout(const Architecture& arch);

}  // namespace wm::models::wan21
