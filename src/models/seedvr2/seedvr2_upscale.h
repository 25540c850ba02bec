// SeedVR2 one-step video upscaling (kind `seedvr2`): the official pipeline of
// ../shared/seedvr2-dit-spec.md §8–9 — resize, crop or pad to multiples of 16, VAE encode (the
// posterior sampled), condition, one DiT step at t = 1000, VAE decode, colour fix, back to 8-bit
// values — computed natively (seedvr2_dit.*, the VAE of seedvr2_vae.*). User docs:
// docs/seedvr2.md.
//
// Two ways in:
// - The pipeline (ModelSession): a slice of RGB frames in 0..1 [3, T, H, W] → the upscaled frames
//   [3, T, H', W'] (values k/255, k an integer: the official 8-bit result). Each slice is one
//   temporal batch; slices repeat the last `batch_overlap` frames of the one before
//   (ModelTraits::slice_overlap), which the scheduler blends across the seam. Output size: the
//   input × `scale`, or its short side made `resolution` (each side floored); the frame is
//   resized to it, padded (edge) to multiples of 16 and the result cropped back.
// - Named tensors (TensorModel, src/models/tensor_model.h): op "dit" (vid, txt, timestep →
//   output) and op "upscale" (one uint8 or float video [T, 3, H, W] → final_u8 [T, H', W', 3] and,
//   with debug, every intermediate under the spec's names). With `resolution: [h, w]` this is the
//   official rule exactly (area resize, centre crop to multiples of 16).
//
// Torch-free header: the registry includes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/model.h"
#include "src/models/seedvr2/seedvr2_dit_layout.h"
#include "src/models/seedvr2/seedvr2_layout.h"

namespace wm::models {

// Options of kind seedvr2 beyond ModelConfig's precision.
struct Seedvr2Options : ModelOptions {
  enum class ColorFix { kWavelet, kAdain, kNone };
  std::string dit;             // the DiT checkpoint (.safetensors or .pth)
  std::string vae;             // the VAE checkpoint (.safetensors or .pth)
  std::string text_embedding;  // the positive text embedding file (pos_emb.pt, .safetensors)
  std::string text_tensor;     // its tensor ("FILE#NAME"); empty: the file's only tensor
  // Optional: the random draws (vae_sample_eps, noise, aug_noise) instead of seeded ones.
  std::string noise;
  int heads = 0;         // 0: from the weights
  int norm_groups = 32;  // the VAE's GroupNorm groups (official 32)
  int64_t seed = 666;
  ColorFix color_fix = ColorFix::kWavelet;
  int scale = 0;  // output = input × scale (0: by resolution)
  int batch_frames = 21;
  int batch_overlap = 4;
  std::string text() const override;
};

const char* to_string(Seedvr2Options::ColorFix c);

// The kind's default target when neither `scale` nor `resolution` is given: a 720-pixel short side.
constexpr int kSeedvr2DefaultShortSide = 720;

// Output frame size (width, height) for an input of width × height: × scale, or the short side
// made `short_side` (each side floored). The scheduler sizes the writer with it.
std::pair<int, int> seedvr2_output_size(int width, int height, int scale, int short_side);
// The official area rule (spec §9.2): (height, width) = round(H0·s), round(W0·s) with
// s = √(res_h·res_w / (H0·W0)), halves to even.
std::pair<int, int> seedvr2_area_size(int height, int width, int res_h, int res_w);
// Centre crop of `length` to a multiple of 16: (kept, first), first = round((length − kept) / 2)
// with halves to even.
std::pair<int, int> seedvr2_crop16(int length);
// Frames the VAE gets for `frames` frames: 4k + 1 (1 stays 1, 2–4 → 5), the last repeated.
int64_t seedvr2_padded_frames(int64_t frames);

// Builds the model from config.options (Seedvr2Options): the DiT checkpoint (architecture read
// from its shapes, keys checked: one line naming the file for a wrong or truncated one, exit 65),
// the text embedding, the VAE (options' norm_groups, config.precision). Task "dit": the DiT alone.
std::unique_ptr<Model> make_seedvr2(const ModelConfig& config, const Device& device);

// The same with random weights of the given architectures (benchmarks; file paths ignored): the
// DiT as seedvr2::random_dit_params, the VAE as make_seedvr2_vae_random, a random text embedding
// of `text_tokens` tokens.
std::unique_ptr<Model> make_seedvr2_random(const ModelConfig& config,
                                           const seedvr2::DitArchitecture& dit,
                                           const seedvr2::Architecture& vae, int text_tokens,
                                           const Device& device, uint64_t seed);

// Seconds of each stage of one batch (each stage synchronised with the device).
struct Seedvr2StageSeconds {
  double resize = 0, encode = 0, dit = 0, decode = 0, color_fix = 0, total = 0;
  // CUDA: the device memory allocated at the end of each stage (and at the start: "start"), in
  // bytes, and the most allocated at once during the batch.
  std::vector<std::pair<std::string, int64_t>> allocated;
  int64_t peak_allocated = 0;
};
// One batch of `frames` ([3, T, H, W], 0..1) through a model of make_seedvr2(_random), timed per
// stage (benchmarks), on the calling thread; `context`: the device worker's (its streams,
// staging and memory budget), when the caller runs on one. The first call also makes the DiT's
// device copy.
Seedvr2StageSeconds seedvr2_time_batch(const Model& model, const Planar& frames,
                                       exec::DeviceContext* context = nullptr);
// One batch (`frames` [3, T, H, W], 0..1: its real frames) through a model of
// make_seedvr2(_random) → the upscaled frames, values k / 255 [3, T, H', W'], seeded by
// ctx.first_frame. With ctx.halo of more than one rank, this call is rank ctx.halo->rank() of the
// batch split inside (sequence parallelism): every rank passes the whole batch; rank r runs the
// r-th run of its latent frames (as even as they fall; each rank at least one) through the VAE,
// with each causal conv's history from rank r − 1 (ctx.halo's ring: history_from r − 1,
// history_to r + 1), and its share of whole windows through the DiT; the latents and the text's
// window outputs move between the ranks. It returns its run's frames: the ranks' outputs in rank
// order are the batch's, as one device makes them. Errors: ModelError (more ranks than latent
// frames or than DiT windows: one line).
Planar seedvr2_upscale_batch(const Model& model, const Planar& frames, const RunContext& ctx);
// DiT blocks resident on the device (the rest stream from pinned host memory); 0 before the
// model's first batch.
int seedvr2_resident_blocks(const Model& model);

}  // namespace wm::models
