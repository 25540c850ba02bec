// The built-in resampler on a GPU as the LibTorch side's model (resample_frames.cpp), made by
// kind name through src/models/torch_side.h (resample_kinds.cpp). Internal to
// src/models/resample/torch/.
#pragma once

#include <memory>

#include "src/model.h"

namespace wm::models {

std::unique_ptr<Model> make_gpu_resampler(const ModelConfig& config, const Device& device);

}  // namespace wm::models
