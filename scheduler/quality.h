// Reconstruction quality: PSNR and SSIM of decoded frames against their sources, accumulated
// frame by frame. Values are RGB in [0, 1]; outputs are clamped to it first (as when written).
#pragma once

#include <cstdint>

#include "src/base/planar.h"

namespace wm::sched {

class QualityMeter {
 public:
  // Adds frame `t` of `reference` and `output` (both [3, T, H, W], same size) whose values v map
  // to [0, 1] as (v - bias) / scale.
  void add_frame(const Planar& reference, const Planar& output, int t, float scale = 1.0f,
                 float bias = 0.0f);
  int64_t frames() const { return frames_; }
  // PSNR over all frames from the mean squared error (dB; 100 when identical).
  double psnr() const;
  // Mean SSIM of the luma (BT.601 weights), 11x11 Gaussian window (sigma 1.5), per frame.
  double ssim() const;

 private:
  int64_t frames_ = 0;
  double squared_error_ = 0;
  double samples_ = 0;
  double ssim_sum_ = 0;
};

// SSIM of two single-channel images in [0, 1] (h×w, row-major).
double ssim_plane(const float* a, const float* b, int height, int width);

}  // namespace wm::sched
