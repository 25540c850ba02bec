// Wan2.1 video VAE (encoder and decoder), exact whole-sequence semantics with causal slicing
// (../shared/wan21-vae-spec.md; user docs: docs/wan21-vae.md).
//
// decode (config.task "decode"): latents [z_dim, T, h, w] → RGB [3, T', 8h, 8w], unclamped,
//   T' = 1 + 4(T−1) for the slice holding sequence frame 0, 4T for later slices.
// encode ("encode"): RGB in [−1, 1] [3, F, H, W] (H, W multiples of 8) → normalised latents
//   [z_dim, F', H/8, W/8]; the first slice needs F = 1 + 4k (→ 1 + k), later slices F = 4k (→ k).
//
// Sessions keep causal state per RunContext::tile_index: run the slices of one tile in order,
// the first with ctx.first_slice = true (that resets the tile's state); the outputs concatenated
// equal one whole-sequence pass. Each run() processes its whole slice in one pass per layer.
//
// The Model holds the weights (a host copy plus one copy per device, made on the first session
// there) and is safe to share between threads; a session is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::models {

// Builds the decoder (config.task == "decode") or encoder ("encode") with weights from
// config.weights (.safetensors, official key layout, F32/F16/BF16). Throws ModelError naming the
// key and both shapes for missing, unexpected or mis-shaped keys, and for bad configs.
std::unique_ptr<Model> make_wan21_vae(const ModelConfig& config, const Device& device);

// The same model with random weights (benchmarks, tests; config.weights is ignored): conv weights
// and biases uniform in ±1/√fan_in (PyTorch's default init), RMSNorm gammas 1. Deterministic for
// a given seed.
std::unique_ptr<Model> make_wan21_vae_random(const ModelConfig& config, const Device& device,
                                             uint64_t seed);

// One parameter of the checkpoint layout.
struct Wan21Param {
  std::string key;
  std::vector<int64_t> shape;
  bool decoder = false;  // used by the decoder (decoder.*, conv2.*) rather than the encoder
};
// The whole checkpoint layout (encoder, conv1, conv2, decoder) the config implies, in the
// official order. Throws ModelError for an invalid architecture.
std::vector<Wan21Param> wan21_vae_layout(const ModelConfig& config);

// The official per-channel latent statistics (16 channels), the defaults for
// config.latent_mean / latent_std.
const std::vector<double>& wan21_latent_mean();
const std::vector<double>& wan21_latent_std();

}  // namespace wm::models
