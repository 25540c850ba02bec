// YUV ↔ RGB on tensors, in ATen operations only, so the same code runs on the GPU (the device
// frame path, parallel/frame_path.h) and on the CPU (CI tests it there against libswscale, the
// host path's converter: tests/unit/test_yuv_colour.cpp; a `gpu` test checks the device against
// the CPU).
//
// Frames are packed (src/base/yuv_format.h: yuv_layout) in a [T, frame_bytes] uint8 tensor.
// To RGB: samples (any depth 8..16, planar or semi-planar, sample shift) are normalised with the
// format's range, chroma is brought to luma resolution by linear interpolation at the format's
// siting (libswscale's bilinear upsampling, edge samples repeated), the matrix gives R, G, B,
// clamped to [0, 1] as the host path's float frames are.
// From RGB: values are clamped to [0, 1], converted with the matrix at full resolution, chroma is
// brought down by a triangle filter twice the chroma spacing wide centred on each chroma sample
// (libswscale's bilinear downscaling: [1 3 3 1]/8 for centred siting, [1 2 1]/4 co-sited; edge
// samples repeated), scaled to the range and quantised: with `dither` an ordered 8×8 Bayer
// threshold (±1/2 level, the same pattern every frame, so static areas stay static) is added
// before rounding, else rounding to nearest. Float32 arithmetic throughout.
//
// Threading: a YuvConverter is immutable after construction; calls may come from any thread
// (they launch on the caller's current stream).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>

#include "src/base/yuv_format.h"

namespace wm::models {

class YuvConverter {
 public:
  // Converts between `format`'s frames (packed with rows aligned to `align` bytes) and RGB of
  // the same size, on `device` (index tables and the dither pattern live there).
  YuvConverter(const YuvFormat& format, size_t align, at::Device device);

  const YuvFormat& format() const { return format_; }
  const YuvLayout& layout() const { return layout_; }

  // packed [T, frame_bytes] uint8 on the device → [T, 3, H, W] `dtype`, RGB in [0, 1].
  at::Tensor to_rgb(const at::Tensor& packed, at::ScalarType dtype) const;
  // [T, 3, H, W] (any float dtype, on the device) → packed [T, frame_bytes] uint8 (padding bytes
  // unspecified).
  at::Tensor from_rgb(const at::Tensor& rgb, bool dither) const;

 private:
  // Linear interpolation of chroma to luma positions along one axis.
  struct Upsample {
    at::Tensor first, second, weight;  // indices, and the weight of `second`
  };
  // The triangle filter along one axis: taps (chroma index → luma index) and their weights.
  struct Downsample {
    std::vector<at::Tensor> taps;
    std::vector<float> weights;
  };
  at::Tensor plane_samples(const at::Tensor& packed, int p) const;
  void store_plane(at::Tensor& packed, int p, const at::Tensor& samples) const;
  at::Tensor upsample(const at::Tensor& c) const;
  at::Tensor downsample(const at::Tensor& c) const;
  at::Tensor quantise(const at::Tensor& v, bool luma, bool dither) const;

  YuvFormat format_;
  YuvLayout layout_;
  at::Device device_;
  Upsample up_x_, up_y_;
  Downsample down_x_, down_y_;
  at::Tensor dither_luma_, dither_chroma_;  // [H, W] and [Hc, Wc] thresholds in (-1/2, 1/2)
};

}  // namespace wm::models
