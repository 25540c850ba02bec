// The kinds that load a user's exported module, on the LibTorch side (torch_kinds.h):
// TorchScript (torchscript.cpp) and AOTInductor packages (aoti.cpp).
#include "src/models/aoti.h"
#include "src/models/torch/torch_kinds.h"
#include "src/models/torchscript.h"

WM_TORCH_KINDS(scripted)

namespace wm::models {
namespace {
const TorchKind kTorchscript("torchscript", make_torchscript);
const TorchKind kAoti("aoti", make_aoti);
}  // namespace
}  // namespace wm::models
