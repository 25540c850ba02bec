// The LibTorch side of the device frame path (frame_path.h), reached through torch_side.h.
#pragma once

#include <memory>

#include "parallel/frame_path.h"

namespace wm::parallel {

std::unique_ptr<FramePath> make_frame_path_device(const Model& model, const Device& device,
                                                  const FramePathConfig& config);

}  // namespace wm::parallel
