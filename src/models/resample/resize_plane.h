// Lanczos resize of a single plane (an image's alpha channel), torch-free for the scheduler: the
// models see RGB only, and the alpha of an image goes around them, upscaled with the built-in
// resampler to the model's output size (docs/models.md, "Images").
#pragma once

#include "src/base/planar.h"

namespace wm::models {

// `plane` [1,1,h,w] → [1,1,height,width], values clamped to [0,1]. The same integer scale 2, 3 or
// 4 on both axes uses the built-in lanczos resampler (resample_cpu, bit for bit the `lanczos`
// model on one channel, without LibTorch); other sizes the general Lanczos-3 (lanczos_resize,
// through the LibTorch side: src/models/torch_side.h). The same size is a copy.
Planar resize_plane_lanczos(const Planar& plane, int width, int height);

}  // namespace wm::models
