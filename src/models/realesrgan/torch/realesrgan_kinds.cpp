// The Real-ESRGAN family's kinds on the LibTorch side (src/models/torch/torch_kinds.h).
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/torch/torch_kinds.h"

WM_TORCH_KINDS(realesrgan)

namespace wm::models {
namespace {
const TorchKind kRealesrgan("realesrgan", make_realesrgan);
}  // namespace
}  // namespace wm::models
