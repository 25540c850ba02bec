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

// Options of kind wan2.1-vae (its `model:` keys besides weights and tuning): the architecture;
// defaults are the official checkpoint's.
struct Wan21VaeOptions : ModelOptions {
  int dim = 96;
  int z_dim = 16;
  std::vector<int> dim_mult = {1, 2, 4, 4};
  int num_res_blocks = 2;
  std::vector<bool> temporal_downsample = {false, true, true};
  std::vector<double> latent_mean;  // empty: the official values
  std::vector<double> latent_std;   // empty: the official values
  std::string text() const override {
    std::string s = "dim " + std::to_string(dim) + "\nz_dim " + std::to_string(z_dim) +
                    "\nnum_res_blocks " + std::to_string(num_res_blocks) + "\ndim_mult";
    for (int m : dim_mult) s += " " + std::to_string(m);
    s += "\ntemporal_downsample";
    for (bool t : temporal_downsample) s += t ? " 1" : " 0";
    s += "\nlatent_mean";
    for (double v : latent_mean) s += " " + std::to_string(v);
    s += "\nlatent_std";
    for (double v : latent_std) s += " " + std::to_string(v);
    return s + "\n";
  }
};

// Builds the decoder (config.task == "decode") or encoder ("encode") of the architecture
// options_as<Wan21VaeOptions>(config) names, with weights from config.weights (.safetensors,
// official key layout, F32/F16/BF16). Throws ModelError naming the key and both shapes for missing,
// unexpected or mis-shaped keys, and for bad configs.
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
// Wan21VaeOptions::latent_mean / latent_std.
const std::vector<double>& wan21_latent_mean();
const std::vector<double>& wan21_latent_std();

}  // namespace wm::models
