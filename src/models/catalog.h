// Models by name: the table of released model files (configs/models.yaml, read at run time) and
// the models folder where a user keeps them. `--model realesr-animevideov3` and `weights:
// realesr-animevideov3` in a job file name a file of that folder; the table adds the kind and
// scale of the released names and says where their official files come from (wmbatch downloads
// nothing). docs/models.md, "Models by name".
//
// The models folder: set_models_dir() (wmbatch --models-dir), else $WMBATCH_MODELS, else
// $XDG_DATA_HOME/wmbatch/models, else ~/.local/share/wmbatch/models.
// The table: <exe>/../share/wmbatch/models.yaml (what `cmake --install` puts beside bin/), else
// configs/models.yaml of the source tree the program was built from (a build folder).
//
// Torch-free, libav-free (job validation uses it). Threading: set_models_dir() before other
// threads start; the table is read once, on first use, then read-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wm {

struct ReleasedModel {
  std::string name;                 // "realesr-animevideov3"
  std::string kind;                 // a registry kind ("realesrgan")
  int scale = 0;                    // output scale of an upscaler; 0: not one
  std::string task;                 // "upscale" | "latents"
  std::vector<std::string> files;   // file names; the first is the released one
  std::vector<std::string> sha256;  // one per file; "" when not known
  std::string source;               // where the official file comes from
  std::string license;
  std::string note;
};

struct ModelCatalog {
  std::string path;  // the table read; empty when none was found
  std::vector<ReleasedModel> models;
  // By name (exact, else case-insensitive), or null.
  const ReleasedModel* find(const std::string& name) const;
  // The entry listing `file_name` (a file name, no folder), or null.
  const ReleasedModel* find_file(const std::string& file_name) const;
};

// The table, read on first use from the first of table_candidates() that exists (an empty
// catalog when none does). Throws ConfigError (exit 65) naming the table's line for a malformed
// one.
const ModelCatalog& model_catalog();
// Where the table is looked for, in order.
std::vector<std::string> table_candidates();
// Reads a table file (tests). Throws ConfigError.
ModelCatalog read_catalog(const std::string& path);

// The models folder and what chose it ("--models-dir", "WMBATCH_MODELS", "XDG_DATA_HOME",
// "HOME").
struct ModelsFolder {
  std::string path;
  std::string from;
};
void set_models_dir(const std::string& dir);
ModelsFolder models_folder();

// Whether a `--model` / `weights:` value is a name rather than a path: no '/', and no weight
// file extension (.pth .safetensors .pt .pt2 .ckpt .bin .onnx).
bool is_model_name(const std::string& value);

// The kind a weights file implies: the table's kind for a released file name, else by extension
// (.pt torchscript, .pt2 aoti, .pth realesrgan); "" when it cannot tell (a .safetensors file
// that is no released one: an upscaler or a VAE).
std::string kind_of_weights(const std::string& path);

// A model file found by name.
struct FoundModel {
  std::string path;                         // absolute
  std::string kind;                         // as kind_of_weights; "" unknown
  const ReleasedModel* released = nullptr;  // the table's entry, if a released name
};
// Looks `name` up in the models folder: NAME.pth, NAME.safetensors, NAME.pt, NAME.pt2, then the
// table's files of `name`. Throws Error (exit 66) with one line that says which folder was
// searched (and what chose it), which file names, what the folder holds, and for a released name
// where the official file comes from.
FoundModel find_model(const std::string& name);

// One weight file of the models folder, for `wmbatch models`.
struct ModelFile {
  std::string name;  // the name to give --model (the file name without extension)
  std::string file;  // file name
  std::string path;  // absolute
  std::string kind;  // "" unknown
  int scale = 0;     // from the table; 0 unknown
  int64_t size = 0;  // bytes
  const ReleasedModel* released = nullptr;
};
// The weight files of `folder` (.pth .safetensors .pt .pt2), sorted by name; empty when the
// folder does not exist.
std::vector<ModelFile> list_models(const std::string& folder);

}  // namespace wm
