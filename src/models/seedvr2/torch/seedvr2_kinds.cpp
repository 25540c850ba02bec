// The SeedVR2 family's kinds on the LibTorch side (src/models/torch/torch_kinds.h).
#include "src/models/seedvr2/seedvr2_upscale.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/torch/torch_kinds.h"

WM_TORCH_KINDS(seedvr2)

namespace wm::models {
namespace {
const TorchKind kSeedvr2Vae("seedvr2-vae", make_seedvr2_vae);
const TorchKind kSeedvr2("seedvr2", make_seedvr2);
}  // namespace
}  // namespace wm::models
