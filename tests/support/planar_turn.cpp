// turn_clockwise (planar_ops.h) on its own: it needs no LibTorch, so the sanitizer build's
// support library (tests/sanitize.cmake) links this file and not the rest of planar_ops.cpp.
#include "tests/support/planar_ops.h"

namespace wm::test {

Planar turn_clockwise(const Planar& in) {
  Planar out(in.channels, 1, in.width, in.height);
  for (int c = 0; c < in.channels; ++c) {
    for (int y = 0; y < out.height; ++y) {
      for (int x = 0; x < out.width; ++x) {
        out.plane(c, 0)[size_t(y) * out.width + x] =
            in.plane(c, 0)[size_t(in.height - 1 - x) * in.width + y];
      }
    }
  }
  return out;
}

}  // namespace wm::test
