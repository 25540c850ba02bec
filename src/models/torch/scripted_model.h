// The model around a user's compiled network (torchscript.h, aoti.h): probe, traits, sessions.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>

#include "src/model.h"

namespace wm::models {

// `forward` maps [N, 3, H, W] (on `device`, in the config's precision) to [N, 3, s·H, s·W].
// `what` names the file in errors ("PATH (torchscript)").
std::unique_ptr<Model> make_scripted_model(const std::string& what,
                                           std::function<at::Tensor(const at::Tensor&)> forward,
                                           const ModelConfig& config, const Device& device);

}  // namespace wm::models
