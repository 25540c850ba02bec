// The Wan2.1 family's kinds on the LibTorch side (src/models/torch/torch_kinds.h).
#include "src/models/torch/torch_kinds.h"
#include "src/models/wan21/wan21_vae.h"

WM_TORCH_KINDS(wan21)

namespace wm::models {
namespace {
const TorchKind kWan21Vae("wan2.1-vae", make_wan21_vae);
}  // namespace
}  // namespace wm::models
