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

#include "src/model.h"

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

// Causal state of one sequence: per stateful layer (slot), the input frames it keeps.
struct SequenceState {
  std::vector<at::Tensor> slots;  // undefined: sequence start (zeros / nothing seen)
};

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
// measured-fastest (docs/gpu.md); WMBATCH_WAN21_TUNING="key=value,..." overrides them for A/B
// measurements (keys as the member names; booleans 0/1).
struct Tuning {
  bool fused = true;     // CUDA: fused RMSNorm(+bias +residual)+SiLU kernels
  bool raw_conv = true;  // CUDA: cuDNN convs written in place, bias folded into the next kernel
  bool subpixel = true;  // upsample: 2×2 sub-pixel convs on the source instead of nearest + 3×3
  int conv_frames = 0;   // CUDA: output frames per conv call (0: auto ≤ 16, -1: all)
  int tail_frames = 0;   // decode: frames per chunk after the last temporal upsample (0: auto)
  int64_t tail_budget_mib = 0;  // auto tail chunks: working-set budget (0: 1/4 of GPU memory)
  bool cudnn_benchmark = true;  // CUDA: let cuDNN time its algorithms per shape
  static Tuning from_env();     // defaults, then WMBATCH_WAN21_TUNING
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
  // sink(chunk, first_frame, frames_total): chunk holds output frames [first_frame, +n).
  using Sink = std::function<void(const at::Tensor& chunk, int64_t first_frame, int64_t frames)>;
  void forward_chunks(at::Tensor x, SequenceState& state, bool first, int64_t tail_frames,
                      const Sink& sink) const;
  // Tail chunk length for `out_frames` output frames of out_h×out_w: tuning.tail_frames when
  // set, else the most frames whose estimated working set fits tuning.tail_budget_mib (or a
  // quarter of `device_bytes`; 0 = no limit → all frames).
  int64_t auto_tail_frames(int64_t out_frames, int64_t out_h, int64_t out_w,
                           int64_t device_bytes) const;
  const Tuning& tuning() const { return tuning_; }
  Task task() const { return task_; }
  int state_slots() const { return slots_; }
  at::MemoryFormat memory_format() const { return memory_format_; }

 private:
  Task task_;
  at::MemoryFormat memory_format_;
  Tuning tuning_;
  int slots_ = 0;
  size_t tail_start_ = 0;             // decode: first block after the last temporal upsample
  int64_t tail_channels_ = 0;         // decode: widest channel count at full output resolution
  at::Tensor mean_, std_;             // [1, z, 1, 1, 1]
  at::Tensor top_weight_, top_bias_;  // conv2 (decode) or conv1[:z] (encode), 1×1×1
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<std::string> block_names_;  // for per-stage timings

  at::Tensor run_block(size_t i, at::Tensor x, SequenceState& state, bool first) const;
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
