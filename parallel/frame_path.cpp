// The torch-free entry of the device frame path: the LibTorch side builds it (torch_side.h).
#include "parallel/frame_path.h"

#include "parallel/torch_side.h"

namespace wm::parallel {

std::unique_ptr<FramePath> make_frame_path(const Model& model, const Device& device,
                                           const FramePathConfig& config) {
  return torch_devices().make_frame_path(model, device, config);
}

}  // namespace wm::parallel
