// Kind `aoti`: an AOTInductor package (`.pt2`, torch._inductor.aoti_compile_and_package) with the
// contract of torchscript.h ([N, 3, H, W] in 0..1 → [N, 3, s·H, s·W], probed at load, same
// options). Needs LibTorch 2.6 or newer; the registry marks the kind unavailable on older builds,
// so a job naming it fails at validation (exit 65). A package is compiled for one device kind
// and, unless exported with dynamic shapes, one input size: the probe and the tiles must fit it.
#pragma once

#include <memory>

#include "src/model.h"

namespace wm::models {

std::unique_ptr<Model> make_aoti(const ModelConfig& config, const Device& device);

}  // namespace wm::models
