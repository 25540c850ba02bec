// The LibTorch side of the models, as the torch-free code reaches it. Everything that calls into
// LibTorch (the neural models, the resampler on CUDA, the general Lanczos resize) is built into
// wm_core_torch; the rest of the program calls it only through this table, so a run that needs no
// LibTorch never loads it (its start-up alone, ~0.45 s of symbol binding and operator
// registration, was the whole gap of a CPU lanczos job against ffmpeg: docs/performance.md).
//
// Where the table comes from: programs that link the LibTorch side in (tests, wmbench) find it
// at once; wmbatch loads it on first use from wmbatch-torch.so beside its executable (dlopen),
// which resolves the rest of the program (logging, errors, wm_core, wm_parallel) against the
// executable's own symbols. parallel/torch_side.h is the same for the device layer, from the same
// module. docs/architecture.md, "The LibTorch boundary".
//
// Torch-free header. Threading: torch_models() may be called from any thread; the first call
// loads, the others wait for it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "src/base/planar.h"
#include "src/model.h"

namespace wm::models {

struct ResampleKernel;

// Raised when the table changes shape: a wmbatch-torch.so of another build is refused. A new
// model kind does not change it (make_model finds kinds by name).
constexpr int kTorchModelsAbi = 3;

struct TorchModels {
  int abi = kTorchModelsAbi;
  size_t size = sizeof(TorchModels);
  // Builds a model of a kind that computes with LibTorch (the registry's entries without a
  // constructor of their own, registry.cpp), by config.kind: each family registers its kinds on
  // the LibTorch side (src/models/torch/torch_kinds.h). Throws ModelError.
  std::unique_ptr<Model> (*make_model)(const ModelConfig&, const Device&) = nullptr;
  // The built-in resampler on a GPU (resample.h: resample_torch).
  Planar (*resample_torch)(const ResampleKernel& kernel, Planar&& input,
                           const Device& device) = nullptr;
  // One plane [1,1,h,w] resized to width × height by the general Lanczos-3 (lanczos_resize.h),
  // unclamped.
  Planar (*resize_plane)(const Planar& plane, int width, int height) = nullptr;
};

// The table; loads the LibTorch side first when this program does not link it. Throws wm::Error
// (exit 70) naming the module and the loader's reason when it cannot be loaded.
const TorchModels& torch_models();

// True once LibTorch is in this process (always, where the LibTorch side is linked in). Whatever
// LibTorch throws can only exist when this is true.
bool torch_side_loaded();

// What this build's LibTorch side is, read without loading it (wmbatch --version): LibTorch's
// version as built against, whether the build has CUDA code and the CUDA toolkit's version
// (empty without), and the module a run loads (wmbatch-torch.so beside the executable) and
// whether it is there.
struct TorchBuildInfo {
  std::string torch_version;
  bool cuda = false;
  std::string cuda_version;
  std::string module;
  bool module_present = false;
};
TorchBuildInfo torch_build_info();

// The extern "C" entry `name` of the LibTorch side, loading wmbatch-torch.so on first use; for
// parallel/torch_side.cpp. Throws as torch_models() does. Not for programs that link the side in.
void* torch_side_symbol(const char* name);

}  // namespace wm::models
