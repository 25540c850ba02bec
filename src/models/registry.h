// The model registry: the one list of model kinds. Each entry names a kind, the model tasks it
// can run, the keys of the job's `model:` map it accepts, how those keys are read into a
// ModelConfig (per-kind options live with the model, see ModelOptions) and how the model is
// built. Job validation (src/job_spec.cpp) and make_model() both ask this list, so a kind that
// validates is a kind that runs. Code outside it never compares a kind's name: it asks for a
// fact of ModelKind (or of the model's ModelTraits). Adding a kind is one entry in registry.cpp
// (its options struct in its family's torch-free header) and, for a kind that computes with
// LibTorch, one TorchKind in its family's torch/*_kinds.cpp (src/models/torch/torch_kinds.h).
//
// Torch-free: job_spec includes it. Threading: the list is built once, then read-only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm {

// What a kind's option parser reads from the `model:` map. Implemented by the job parser over
// YAML (so models never see YAML); every getter validates its value and throws ConfigError
// ("FILE:LINE: model.KEY: problem", exit 65) on a bad one. Keys are those the kind lists.
class OptionReader {
 public:
  virtual ~OptionReader() = default;
  virtual bool has(const std::string& key) const = 0;
  virtual long long get_int(const std::string& key, long long min, long long max) const = 0;
  // One of `allowed`.
  virtual int get_int_in(const std::string& key, const std::vector<int>& allowed) const = 0;
  // A finite number in [min, max] (or (min, max] when min_exclusive).
  virtual double get_number(const std::string& key, double min, double max,
                            bool min_exclusive = false) const = 0;
  virtual bool get_bool(const std::string& key) const = 0;
  virtual std::string get_string(const std::string& key) const = 0;
  // A file path, resolved against the job file's folder. When `extensions` is not empty the
  // path must end with one of them; `hint` is added to that error.
  virtual std::string get_path(const std::string& key, const std::vector<std::string>& extensions,
                               const std::string& hint = "") const = 0;
  // Lists of `min_items`..`max_items` entries, each checked like the scalar getters (errors
  // name the entry: model.KEY[i]).
  virtual std::vector<int> get_int_list(const std::string& key, size_t min_items, size_t max_items,
                                        int min, int max) const = 0;
  virtual std::vector<bool> get_bool_list(const std::string& key, size_t min_items,
                                          size_t max_items) const = 0;
  virtual std::vector<double> get_number_list(const std::string& key, size_t min_items,
                                              size_t max_items, double min, double max,
                                              bool min_exclusive = false) const = 0;
  // Fails at `key` (at the `model:` map when the key is absent).
  [[noreturn]] virtual void fail(const std::string& key, const std::string& problem) const = 0;
};

// How a kind's latent files (tasks encode_latents, decode_latents) relate to its VAE's latents.
struct LatentFileRule {
  // file latent = (z − shift) · scale, applied outside the model; files carry scale and shift in
  // their metadata (`latent_scale`, `latent_shift`). Off: files hold z.
  bool affine = false;
  double scale = 1.0;
  double shift = 0.0;
  // The encoder's output holds the posterior's logvar after its mean (written as latent_logvar).
  bool logvar = false;
};

struct ModelKind {
  std::string name;
  // Model tasks it runs: "upscale", "decode", "encode", "dit" (config.task). A job task needs all
  // of its model tasks (reconstruct: encode and decode).
  std::vector<std::string> tasks;
  // Keys of `model:` besides `kind`.
  std::vector<std::string> options;
  // Reads the options into `config` (config.task is set). May be null (no options).
  void (*parse)(const OptionReader& reader, ModelConfig& config) = nullptr;
  // Builds the model (kinds that compute with LibTorch: make_on_torch_side, which finds the
  // kind's TorchKind). Throws ModelError.
  std::unique_ptr<Model> (*make)(const ModelConfig& config, const Device& device) = nullptr;
  // Computes with LibTorch: `make` is make_on_torch_side, which builds it by the TorchKind its
  // family registers (src/models/torch/torch_kinds.h); making one loads the torch side.
  bool torch_side = false;
  // Computes with LibTorch on a CUDA device only (the resamplers: torch-free on the CPU, the
  // LibTorch side's model on a GPU, registered by the family like the kinds above).
  bool torch_side_on_gpu = false;
  // Not empty: this build cannot run the kind, and says why (validation fails with it).
  std::string unavailable;
  // The kind sizes its output by the job's `resolution:` (ModelConfig::resolution).
  bool resolution = false;
  // Precisions the kind runs in on the CPU (a job on `devices: cpu` asking for another fails
  // validation); empty: any.
  std::vector<Precision> cpu_precisions;
  // Precisions the kind runs in on any device (a job asking for another fails validation, never
  // runs in fp32 silently); empty: any.
  std::vector<Precision> precisions;
  // Facts about the kind that job validation and the scheduler need before a model exists (so
  // no code outside this list compares kind names):
  // frames per decode slice on a GPU when the job leaves `slice_frames` to the model (0: the
  // general rule, geometry.h auto_slice_frames);
  int gpu_decode_slice_frames = 0;
  // its encoder takes frames and tiles whose sides are multiples of this (0: any);
  int encode_side_multiple = 0;
  // its encoder's state between slices is exact only when the slices after the first hold whole
  // groups of this many frames (0: any);
  int encode_slice_group = 0;
  // how its latent files relate to what its VAE takes and gives (null: as they are);
  LatentFileRule (*latent_files)(const ModelConfig& config) = nullptr;
  // a frame-wise resampler the YUV path runs natively (models::ResampleKernel);
  bool yuv_resampler = false;
  // loads TorchScript modules (a state-dict file given to it is an error that names the kind);
  bool loads_modules = false;
};

// Every kind, in the order documentation and error messages list them.
const std::vector<ModelKind>& model_kinds();
// The kind called `name`, or null.
const ModelKind* find_model_kind(const std::string& name);
// Kinds that run every one of `tasks`, in registry order.
std::vector<std::string> kinds_for_tasks(const std::vector<std::string>& tasks);
// Every option key of every kind (for the unknown-key check of `model:`), without repeats.
std::vector<std::string> all_model_option_keys();
// The kinds that accept `key`, in registry order.
std::vector<std::string> kinds_with_option(const std::string& key);
// The latent file rule of config's kind (ModelKind::latent_files; off for an unknown kind).
LatentFileRule latent_file_rule(const ModelConfig& config);

}  // namespace wm
