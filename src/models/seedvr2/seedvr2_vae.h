// SeedVR2 video VAE (ByteDance-Seed/SeedVR `VideoAutoencoderKLWrapper`), the `seedvr2-vae` model
// kind: exact whole-sequence semantics with causal slicing (../shared/seedvr2-vae-spec.md; user
// docs: docs/seedvr2-vae.md).
//
// decode (config.task "decode"): z [L, T, h, w] (what the VAE's decode receives: the file
//   latent already mapped back by the scale rule, which the latent tasks apply) → RGB
//   [3, T', 8h, 8w], unclamped; T' = 1 + 4(T − 1) for the slice holding sequence frame 0, 4T for
//   later slices. Slices of any length are exact.
// encode ("encode"): RGB in [−1, 1] [3, F, H, W] (H, W multiples of 8) → the posterior mean
//   [L, F', H/8, W/8], followed by its logvar (clamped to [−30, 20]) when
//   Seedvr2VaeOptions::logvar; the first
//   slice needs F = 1 + 4k (→ 1 + k), later slices F = 4k (→ k): other lengths are not exact
//   (spec §5) and are refused.
//
// Sessions keep causal state per RunContext::tile_index: run the slices of one tile in order, the
// first with ctx.first_slice = true (that resets the tile's state); the outputs concatenated equal
// one whole-sequence pass. Spatial tiles are approximate (GroupNorm statistics and the attention
// span the whole frame): traits().halo_exact is false and the halo is a recommended overlap.
//
// The Model holds the weights (a host float32 copy plus one network per device, made on the first
// session there) and is safe to share between threads; a session is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/model.h"
#include "src/models/seedvr2/seedvr2_layout.h"

namespace wm::models {

// Options of kind seedvr2-vae (its `model:` keys besides weights and tuning; channel widths come
// from the checkpoint): GroupNorm groups, the scale rule of its latent files (file latent =
// (posterior − shift) · scale, applied by the latent tasks outside the VAE, registry:
// latent_files); encode: also give the posterior's logvar.
struct Seedvr2VaeOptions : ModelOptions {
  int norm_groups = 32;  // GroupNorm groups (official 32)
  double latent_scale = 0.9152;
  double latent_shift = 0.0;
  bool logvar = false;
  std::string text() const override {
    return "norm_groups " + std::to_string(norm_groups) + "\nlatent_scale " +
           std::to_string(latent_scale) + "\nlatent_shift " + std::to_string(latent_shift) +
           "\nlogvar " + (logvar ? "1" : "0") + "\n";
  }
};

// Builds the decoder (config.task == "decode") or the encoder ("encode") from config.weights:
// a .safetensors file, or the release .pth (torch.save zip, read by the restricted pickle reader
// src/weights/torch_pickle.h), with the official key layout (F32/F16/BF16/F64), channel widths read
// from its shapes, Seedvr2VaeOptions::norm_groups groups. Throws ModelError (exit 65) naming the
// file and the key for a missing, mis-shaped or unexpected key, and for bad configs.
std::unique_ptr<Model> make_seedvr2_vae(const ModelConfig& config, const Device& device);

// The same model with random weights (benchmarks, tests; config.weights and the options'
// norm_groups are ignored: `arch` says everything), drawn as the golden data's were (meta.json
// "init"): GroupNorm weights 1 + U(±0.25), biases U(±0.25); conv and linear weights
// U(±√(3/fan_in)), biases U(±0.1). Deterministic for a given seed.
std::unique_ptr<Model> make_seedvr2_vae_random(const ModelConfig& config,
                                               const seedvr2::Architecture& arch,
                                               const Device& device, uint64_t seed);

}  // namespace wm::models
