// The model registry (registry.h) and make_model: every kind, its tasks, its `model:` keys and
// how they are read, and its constructor, in one list.
#include "src/models/registry.h"

#include <algorithm>

#include "src/base/error.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/resample/resample.h"
#include "src/models/seedvr2/seedvr2_upscale.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/torch_side.h"
#include "src/models/torchscript.h"
#include "src/models/wan21/wan21_vae.h"

// LibTorch's version comes from CMake (src/CMakeLists.txt): wm_core's compile has no LibTorch
// include folder, and every program that compiles this file links wm_core.

namespace wm {
namespace {

// `weights`, required, with one of `extensions` (any when empty).
std::string required_weights(const OptionReader& r, const ModelConfig& config,
                             const std::vector<std::string>& extensions,
                             const std::string& hint = "") {
  if (!r.has("weights")) r.fail("weights", "required for kind " + config.kind);
  return r.get_path("weights", extensions, hint);
}

void parse_resampler(const OptionReader& r, ModelConfig& config) {
  if (r.has("scale")) config.scale = r.get_int_in("scale", {2, 3, 4});
}

void parse_wan21_vae(const OptionReader& r, ModelConfig& m) {
  m.weights = required_weights(r, m, {".safetensors"}, "convert the official .pth first");
  auto options = std::make_shared<models::Wan21VaeOptions>();
  models::Wan21VaeOptions& o = *options;
  if (r.has("dim")) o.dim = int(r.get_int("dim", 1, 4096));
  if (r.has("z_dim")) o.z_dim = int(r.get_int("z_dim", 1, 1024));
  if (r.has("num_res_blocks")) o.num_res_blocks = int(r.get_int("num_res_blocks", 1, 64));
  if (r.has("dim_mult")) o.dim_mult = r.get_int_list("dim_mult", 1, 8, 1, 64);
  if (r.has("temporal_downsample")) {
    o.temporal_downsample = r.get_bool_list("temporal_downsample", 0, 8);
  }
  if (o.temporal_downsample.size() + 1 != o.dim_mult.size()) {
    const std::string steps = std::to_string(o.dim_mult.size() - 1);
    if (!r.has("temporal_downsample")) {
      r.fail("dim_mult", "model.temporal_downsample needs " + steps + " entries to match; set it");
    }
    r.fail("temporal_downsample", "needs " + steps +
                                      " entries, one per step between dim_mult levels (got " +
                                      std::to_string(o.temporal_downsample.size()) + ")");
  }
  const auto stats = [&](const char* key, bool positive) {
    std::vector<double> values;
    if (!r.has(key)) return values;
    values = r.get_number_list(key, 1, 1024, positive ? 0.0 : -1e30, 1e30, positive);
    if (static_cast<int>(values.size()) != o.z_dim) {
      r.fail(key, "needs z_dim = " + std::to_string(o.z_dim) + " numbers (got " +
                      std::to_string(values.size()) + ")");
    }
    return values;
  };
  if (r.has("tuning")) m.tuning = r.get_string("tuning");
  o.latent_mean = stats("latent_mean", false);
  o.latent_std = stats("latent_std", true);
  if (o.z_dim != 16 && (o.latent_mean.empty() || o.latent_std.empty())) {
    r.fail("z_dim",
           "the official latent_mean and latent_std have 16 channels; give both for this z_dim");
  }
  m.options = std::move(options);
}

void parse_seedvr2_vae(const OptionReader& r, ModelConfig& m) {
  m.weights = required_weights(r, m, {".safetensors", ".pth"},
                               "the official ema_vae_fp16 release, .safetensors or .pth");
  auto options = std::make_shared<models::Seedvr2VaeOptions>();
  if (r.has("norm_groups")) options->norm_groups = int(r.get_int("norm_groups", 1, 4096));
  if (r.has("latent_scale")) options->latent_scale = r.get_number("latent_scale", 0, 1e6, true);
  if (r.has("latent_shift")) options->latent_shift = r.get_number("latent_shift", -1e6, 1e6);
  if (r.has("logvar")) options->logvar = r.get_bool("logvar");
  if (r.has("tuning")) m.tuning = r.get_string("tuning");
  m.options = std::move(options);
}

// Its latent files hold (z − shift) · scale (0.9152 and 0 by default, outside the VAE: spec §1).
LatentFileRule seedvr2_vae_latents(const ModelConfig& m) {
  const auto& o = options_as<models::Seedvr2VaeOptions>(m);
  return {true, o.latent_scale, o.latent_shift, o.logvar};
}

void parse_realesrgan(const OptionReader& r, ModelConfig& m) {
  m.weights = required_weights(r, m, {".pth", ".safetensors"},
                               "the released Real-ESRGAN files, or safetensors with their keys");
  auto options = std::make_shared<models::RealEsrganOptions>();
  if (r.has("scale")) options->scale = int(r.get_int("scale", 1, 8));
  m.options = std::move(options);
}

// `text_embedding`: FILE, or FILE#TENSOR for a file of several tensors.
void parse_text_embedding(const OptionReader& r, models::Seedvr2Options& options) {
  std::string text = r.get_path("text_embedding", {});
  const size_t hash = text.rfind('#');
  if (hash != std::string::npos && text.find('/', hash) == std::string::npos) {
    options.text_tensor = text.substr(hash + 1);
    text.resize(hash);
    if (options.text_tensor.empty()) r.fail("text_embedding", "names no tensor after '#'");
  }
  const auto ends = [&](const std::string& tail) {
    return text.size() >= tail.size() &&
           text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!ends(".pt") && !ends(".pth") && !ends(".safetensors")) {
    r.fail("text_embedding",
           "must be a .pt, .pth or .safetensors file (pos_emb.pt), optionally "
           "with #TENSOR");
  }
  options.text_embedding = text;
}

// seedvr2: the DiT and VAE files, the text embedding ("FILE#TENSOR" names a tensor of a file
// of several), the run's choices.
void parse_seedvr2(const OptionReader& r, ModelConfig& m) {
  auto options = std::make_shared<models::Seedvr2Options>();
  const std::vector<std::string> weights = {".safetensors", ".pth", ".pt"};
  // Task dit (the DiT alone, on the inputs' own text) needs only the DiT.
  const bool upscale = m.task == "upscale";
  for (const char* key : {"dit", "vae", "text_embedding"}) {
    if (!r.has(key) && (upscale || std::string(key) == "dit")) {
      r.fail(key, std::string("required for kind seedvr2") + (upscale ? " (task upscale)" : ""));
    }
  }
  options->dit =
      r.get_path("dit", weights, "seedvr2_ema_3b.pth, seedvr2_ema_7b.pth or a conversion");
  if (r.has("vae")) options->vae = r.get_path("vae", weights, "ema_vae.pth or a conversion");
  if (r.has("text_embedding")) parse_text_embedding(r, *options);
  if (r.has("noise")) options->noise = r.get_path("noise", {".safetensors"});
  if (r.has("heads")) options->heads = int(r.get_int("heads", 1, 1024));
  if (r.has("norm_groups")) options->norm_groups = int(r.get_int("norm_groups", 1, 4096));
  if (r.has("seed")) options->seed = r.get_int("seed", 0, (1LL << 53));
  if (r.has("color_fix")) {
    const std::string c = r.get_string("color_fix");
    if (c == "wavelet") {
      options->color_fix = models::Seedvr2Options::ColorFix::kWavelet;
    } else if (c == "adain") {
      options->color_fix = models::Seedvr2Options::ColorFix::kAdain;
    } else if (c == "none") {
      options->color_fix = models::Seedvr2Options::ColorFix::kNone;
    } else {
      r.fail("color_fix", "must be wavelet, adain or none (got '" + c + "')");
    }
  }
  if (r.has("scale")) options->scale = int(r.get_int("scale", 1, 8));
  if (r.has("batch_frames")) {
    options->batch_frames = int(r.get_int("batch_frames", 1, 4097));
    if (options->batch_frames % 4 != 1) {
      r.fail("batch_frames",
             "must be 4n + 1 frames (the VAE's time grouping), e.g. 21 or 45 (got " +
                 std::to_string(options->batch_frames) + ")");
    }
  }
  if (r.has("batch_overlap")) {
    options->batch_overlap = int(r.get_int("batch_overlap", 0, 4096));
  } else {
    options->batch_overlap = std::min(options->batch_overlap, (options->batch_frames - 1) / 2);
  }
  // Each seam's frames belong to two batches only: the overlap at most half a batch.
  if (2 * options->batch_overlap >= options->batch_frames) {
    r.fail(r.has("batch_overlap") ? "batch_overlap" : "batch_frames",
           "batch_overlap (" + std::to_string(options->batch_overlap) +
               ") must be less than half of batch_frames (" +
               std::to_string(options->batch_frames) + ")");
  }
  m.options = std::move(options);
}

// torchscript and aoti: a user's module with a declared (or probed) scale and halo.
void parse_scripted(const OptionReader& r, ModelConfig& m) {
  m.weights = required_weights(
      r, m, m.kind == "aoti" ? std::vector<std::string>{".pt2"} : std::vector<std::string>{},
      "an AOTInductor package (torch._inductor.aoti_compile_and_package)");
  auto options = std::make_shared<models::ScriptedOptions>();
  if (r.has("scale")) options->scale = int(r.get_int("scale", 1, 16));
  if (r.has("halo")) options->halo = int(r.get_int("halo", 0, 4096));
  m.options = std::move(options);
}

std::string aoti_unavailable() {
#if WM_TORCH_VERSION_MAJOR > 2 || (WM_TORCH_VERSION_MAJOR == 2 && WM_TORCH_VERSION_MINOR >= 6)
  return "";
#else
  return "kind aoti needs LibTorch 2.6 or newer (this build has " WM_TORCH_VERSION
         "); export the model with torch.jit.trace and use kind torchscript";
#endif
}

// The kinds that compute with LibTorch: built by its side, loaded on first use
// (src/models/torch_side.h), which finds the kind's constructor by name
// (src/models/torch/torch_kinds.h), so validating a job or running a resampler never loads it.
std::unique_ptr<Model> make_on_torch_side(const ModelConfig& c, const Device& d) {
  return models::torch_models().make_model(c, d);
}

ModelKind entry(std::string name, std::vector<std::string> tasks, std::vector<std::string> keys,
                void (*parse)(const OptionReader&, ModelConfig&),
                std::unique_ptr<Model> (*make)(const ModelConfig&, const Device&)) {
  ModelKind k;
  k.name = std::move(name);
  k.tasks = std::move(tasks);
  k.options = std::move(keys);
  k.parse = parse;
  k.make = make;
  k.torch_side = make == make_on_torch_side;
  return k;
}

// The resamplers: torch-free on the CPU (a CPU job never loads LibTorch); on a GPU the LibTorch
// side's model, which also takes frames on its device (the device frame path).
std::unique_ptr<Model> make_resampler(const ModelConfig& c, const Device& d) {
  if (d.kind == Device::Kind::kCuda) return make_on_torch_side(c, d);
  return models::make_resampler(c);
}

// The kinds, in the order documentation and error messages list them. A new kind is one entry.
std::vector<ModelKind> build_kinds() {
  const std::vector<std::string> scripted_keys = {"weights", "scale", "halo"};
  std::vector<ModelKind> kinds;
  // The built-in resamplers compute in float32 on every device.
  kinds.push_back(entry("lanczos", {"upscale"}, {"scale"}, parse_resampler, make_resampler));
  kinds.back().precisions = {Precision::kFloat32};
  kinds.back().yuv_resampler = true;
  kinds.back().torch_side_on_gpu = true;
  kinds.push_back(entry("bicubic", {"upscale"}, {"scale"}, parse_resampler, make_resampler));
  kinds.back().precisions = {Precision::kFloat32};
  kinds.back().yuv_resampler = true;
  kinds.back().torch_side_on_gpu = true;
  kinds.push_back(
      entry("realesrgan", {"upscale"}, {"weights", "scale"}, parse_realesrgan, make_on_torch_side));
  kinds.back().cpu_precisions = {Precision::kFloat32};
  kinds.push_back(
      entry("torchscript", {"upscale"}, scripted_keys, parse_scripted, make_on_torch_side));
  kinds.back().cpu_precisions = {Precision::kFloat32};
  kinds.back().loads_modules = true;
  kinds.push_back(entry("aoti", {"upscale"}, scripted_keys, parse_scripted, make_on_torch_side));
  kinds.back().unavailable = aoti_unavailable();
  kinds.push_back(entry("wan2.1-vae", {"decode", "encode"},
                        {"weights", "dim", "z_dim", "dim_mult", "num_res_blocks",
                         "temporal_downsample", "latent_mean", "latent_std", "tuning"},
                        parse_wan21_vae, make_on_torch_side));
  kinds.back().cpu_precisions = {Precision::kFloat32, Precision::kBFloat16};
  kinds.back().encode_side_multiple = 8;
  kinds.push_back(
      entry("seedvr2-vae", {"decode", "encode"},
            {"weights", "norm_groups", "latent_scale", "latent_shift", "logvar", "tuning"},
            parse_seedvr2_vae, make_on_torch_side));
  kinds.back().cpu_precisions = {Precision::kFloat32, Precision::kBFloat16};
  kinds.back().gpu_decode_slice_frames = 16;  // docs/gpu.md: its phased decode's sweet spot
  kinds.back().encode_side_multiple = 8;
  kinds.back().encode_slice_group = 4;  // stride-2 time convolutions (seedvr2-vae-spec §5)
  kinds.back().latent_files = seedvr2_vae_latents;
  kinds.push_back(entry("seedvr2", {"upscale", "dit"},
                        {"dit", "vae", "text_embedding", "noise", "heads", "norm_groups", "seed",
                         "color_fix", "scale", "batch_frames", "batch_overlap"},
                        parse_seedvr2, make_on_torch_side));
  kinds.back().resolution = true;
  kinds.back().cpu_precisions = {Precision::kFloat32, Precision::kBFloat16};
  return kinds;
}

}  // namespace

const std::vector<ModelKind>& model_kinds() {
  static const std::vector<ModelKind> kinds = build_kinds();
  return kinds;
}

const ModelKind* find_model_kind(const std::string& name) {
  for (const ModelKind& k : model_kinds()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::vector<std::string> kinds_for_tasks(const std::vector<std::string>& tasks) {
  std::vector<std::string> out;
  for (const ModelKind& k : model_kinds()) {
    const bool all = std::all_of(tasks.begin(), tasks.end(), [&](const std::string& t) {
      return std::find(k.tasks.begin(), k.tasks.end(), t) != k.tasks.end();
    });
    if (all) out.push_back(k.name);
  }
  return out;
}

std::vector<std::string> all_model_option_keys() {
  std::vector<std::string> keys;
  for (const ModelKind& k : model_kinds()) {
    for (const std::string& key : k.options) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
  }
  return keys;
}

std::vector<std::string> kinds_with_option(const std::string& key) {
  std::vector<std::string> out;
  for (const ModelKind& k : model_kinds()) {
    if (std::find(k.options.begin(), k.options.end(), key) != k.options.end()) {
      out.push_back(k.name);
    }
  }
  return out;
}

LatentFileRule latent_file_rule(const ModelConfig& config) {
  const ModelKind* kind = find_model_kind(config.kind);
  return kind && kind->latent_files ? kind->latent_files(config) : LatentFileRule{};
}

std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device) {
  const ModelKind* kind = find_model_kind(config.kind);
  if (!kind) throw ModelError("model kind '" + config.kind + "' is not known");
  if (!kind->unavailable.empty()) throw ModelError(kind->unavailable);
  return kind->make(config, device);
}

}  // namespace wm
