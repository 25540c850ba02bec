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

class Block;

class Network {
 public:
  // Builds the decoder (decoder.*, conv2.*) or the encoder (encoder.*, conv1.*), pulling every
  // parameter from `params` in checkpoint order. `mean`/`std` are the z_dim latent statistics.
  Network(const Architecture& arch, Task task, ParamSource& params, const at::Tensor& mean,
          const at::Tensor& std, at::MemoryFormat memory_format);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // x: [1, C_in, T, H, W] on the network's device/dtype. `first`: x starts at sequence frame 0
  // (the state must then be fresh). Frame counts are the caller's to validate (see wan21_vae.h).
  at::Tensor forward(at::Tensor x, SequenceState& state, bool first) const;
  Task task() const { return task_; }
  int state_slots() const { return slots_; }
  at::MemoryFormat memory_format() const { return memory_format_; }

 private:
  Task task_;
  at::MemoryFormat memory_format_;
  int slots_ = 0;
  at::Tensor mean_, std_;             // [1, z, 1, 1, 1]
  at::Tensor top_weight_, top_bias_;  // conv2 (decode) or conv1[:z] (encode), 1×1×1
  std::vector<std::unique_ptr<Block>> blocks_;
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
