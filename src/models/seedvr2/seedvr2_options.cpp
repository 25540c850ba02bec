// The torch-free half of seedvr2_upscale.h: the kind's options and the frame geometry the
// scheduler needs (output sizes) — wm_core, beside the registry. The model is seedvr2_upscale.cpp.
#include <algorithm>
#include <cmath>

#include "src/models/seedvr2/seedvr2_upscale.h"

namespace wm::models {

const char* to_string(Seedvr2Options::ColorFix c) {
  switch (c) {
    case Seedvr2Options::ColorFix::kWavelet:
      return "wavelet";
    case Seedvr2Options::ColorFix::kAdain:
      return "adain";
    case Seedvr2Options::ColorFix::kNone:
      return "none";
  }
  return "?";
}

std::string Seedvr2Options::text() const {
  return "dit " + dit + "\nvae " + vae + "\ntext_embedding " + text_embedding + "#" + text_tensor +
         "\nnoise " + noise + "\nheads " + std::to_string(heads) + "\nnorm_groups " +
         std::to_string(norm_groups) + "\nseed " + std::to_string(seed) + "\ncolor_fix " +
         to_string(color_fix) + "\nscale " + std::to_string(scale) + "\nbatch_frames " +
         std::to_string(batch_frames) + "\nbatch_overlap " + std::to_string(batch_overlap) + "\n";
}

std::pair<int, int> seedvr2_output_size(int width, int height, int scale, int short_side) {
  if (scale > 0) return {width * scale, height * scale};
  const int64_t shorter = std::max(1, std::min(width, height));
  return {int(int64_t(width) * short_side / shorter), int(int64_t(height) * short_side / shorter)};
}

std::pair<int, int> seedvr2_area_size(int height, int width, int res_h, int res_w) {
  // Python floats: s = sqrt(res_h·res_w / (H0·W0)); round() halves to even.
  const double s = std::sqrt(double(res_h) * double(res_w) / (double(height) * double(width)));
  return {int(std::nearbyint(double(height) * s)), int(std::nearbyint(double(width) * s))};
}

std::pair<int, int> seedvr2_crop16(int length) {
  const int kept = length - length % 16;
  return {kept, int(std::nearbyint(double(length - kept) / 2.0))};
}

int64_t seedvr2_padded_frames(int64_t frames) {
  if (frames <= 1) return 1;
  return frames + (4 - (frames - 1) % 4) % 4;
}

}  // namespace wm::models
