// Users' upscaling networks: kind `torchscript` (a TorchScript module, torch.jit.trace/script +
// save) and kind `aoti` (an AOTInductor package, aoti.h). Either takes [N, 3, H, W] RGB floats
// in 0..1 and returns [N, 3, s·H, s·W].
//
// At load a 16×16 probe runs through the module: its output size gives the scale, which must
// equal `scale:` when the job gives one (else ModelError, exit 65). Tiles: a job's `halo:` is
// taken as the module's exact receptive field (hard seams, tiled == untiled); without one the
// halo is kDefaultScriptedHalo and tiles are feathered, since it may not cover the field.
//
// Torch-free header: the registry includes it.
#pragma once

#include <memory>
#include <string>

#include "src/model.h"

namespace wm::models {

constexpr int kDefaultScriptedHalo = 32;

// Options of kinds torchscript and aoti.
struct ScriptedOptions : ModelOptions {
  int scale = 0;  // 0: the probe's
  int halo = -1;  // -1: kDefaultScriptedHalo, feathered
  std::string text() const override {
    return "scale " + std::to_string(scale) + "\nhalo " + std::to_string(halo) + "\n";
  }
};

// Throws ModelError naming the file: not a TorchScript module, probe failed, wrong scale.
std::unique_ptr<Model> make_torchscript(const ModelConfig& config, const Device& device);

}  // namespace wm::models
