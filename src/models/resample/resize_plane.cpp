#include "src/models/resample/resize_plane.h"

#include <algorithm>

#include "src/models/resample/resample.h"
#include "src/models/torch_side.h"

namespace wm::models {

Planar resize_plane_lanczos(const Planar& plane, int width, int height) {
  if (plane.width == width && plane.height == height) return plane.clone();
  Planar out;
  const int scale = plane.width > 0 ? width / plane.width : 0;
  if (scale >= 2 && scale <= 4 && width == plane.width * scale && height == plane.height * scale) {
    out = resample_cpu(resample_kernel("lanczos", scale), plane.clone());
  } else {
    // Other sizes (a network's output brought to another `scale:`): LibTorch's general resize.
    out = torch_models().resize_plane(plane, width, height);
  }
  for (float& v : out.data) v = std::min(1.0f, std::max(0.0f, v));
  return out;
}

}  // namespace wm::models
