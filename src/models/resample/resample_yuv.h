// The built-in resamplers (lanczos, bicubic) on planes of integer samples, for the YUV-native
// path: a video whose encoder takes the source's own planar YUV format is resampled plane by
// plane at each plane's own size (4:2:0 chroma at half the luma size), in 8-bit or 9..16-bit
// samples, with no conversion to RGB float and back. The filters are separable and linear, so
// this is the same filter as resample_cpu() applied to Y, U and V; chroma is treated as centred
// between luma samples, libswscale's default (and the rule of the RGB path's conversions).
#pragma once

#include <cstddef>

#include "src/models/resample/resample.h"

namespace wm::models {

// One plane of samples: `depth` bits each, in uint8_t when depth is 8, else native-endian
// uint16_t; rows `stride` bytes apart.
struct SamplePlane {
  void* data = nullptr;
  std::ptrdiff_t stride = 0;
  int width = 0;
  int height = 0;
  int depth = 8;
};

// Resamples `in` into `out` (in.width*scale x in.height*scale, the same depth), edge-clamped.
// Each output sample is the kernel's weighted sum computed in float (a vertical pass into a row
// of floats, then a horizontal pass), clamped to the sample range and rounded half up: within
// 0.5 + 1e-3 levels of the exact (double) filter. Threaded over output rows (TBB); the scratch
// rows are per thread and reused, so a call allocates nothing after the first on a thread.
// 8-bit planes at scale 2 run an AVX2 form of the same float operations, in the same order, where
// the CPU has AVX2 (checked at run time): the bytes are the same either way.
void resample_plane(const ResampleKernel& kernel, const SamplePlane& in, const SamplePlane& out);

}  // namespace wm::models
