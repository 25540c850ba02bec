// Planar blocks in tests: frames cut out and joined along time, differences, and float32
// tensors of safetensors files read as planars or values (the unit and job tests of every
// model compare through these).
#pragma once

#include <string>
#include <vector>

#include "src/base/planar.h"
#include "src/weights/safetensors.h"

namespace wm::test {

// Frames [t0, t0 + n) of `p`, channels [c0, c0 + nc) (nc 0: every channel from c0 on).
Planar frames(const Planar& p, int t0, int n, int c0 = 0, int nc = 0);
// `parts` joined along time (same channels and size).
Planar concat(const std::vector<Planar>& parts);
// `in` ([C,1,H,W]) turned a quarter clockwise (the reference for the writer's turns).
Planar turn_clockwise(const Planar& in);
// The built-in lanczos ×2 of an image's RGB ([3,1,H,W]), clamped to [0,1]: what an upscale job
// with the default model computes.
Planar lanczos_x2(const Planar& image);
// The largest |a − b|; a shape or size mismatch fails the test and gives infinity.
double max_abs_diff(const Planar& a, const Planar& b);
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
// A float32 tensor [1, C, T, H, W] or [C, T, H, W] of a safetensors file as a [C, T, H, W]
// planar (another dtype or rank fails the test).
Planar read_planar(const io::SafetensorsFile& file, const std::string& name);
Planar read_planar(const std::string& path, const std::string& name);
// The values of a float32 tensor of a safetensors file, in file order.
std::vector<float> read_floats(const std::string& path, const std::string& name);

}  // namespace wm::test
