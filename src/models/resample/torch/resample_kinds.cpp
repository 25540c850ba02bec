// The built-in resamplers' kinds on the LibTorch side (src/models/torch/torch_kinds.h): their
// model on a GPU (the registry makes the torch-free one for the CPU, registry.cpp).
#include "src/models/resample/torch/resample_frames.h"
#include "src/models/torch/torch_kinds.h"

WM_TORCH_KINDS(resample)

namespace wm::models {
namespace {
const TorchKind kLanczos("lanczos", make_gpu_resampler);
const TorchKind kBicubic("bicubic", make_gpu_resampler);
}  // namespace
}  // namespace wm::models
