// Wan2.1 video VAE (encoder and decoder), exact whole-sequence semantics with causal slicing.
#pragma once

#include <memory>

#include "src/model.h"

namespace wm::models {

// Builds the decoder (config.task == "decode") or encoder ("encode") with weights from
// config.weights (.safetensors, official key layout). Throws ModelError naming the key/shape.
std::unique_ptr<Model> make_wan21_vae(const ModelConfig& config, const Device& device);

}  // namespace wm::models
