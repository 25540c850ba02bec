// YuvFormat: how a picture's YUV samples are stored and what colours they mean, without libav or
// Torch types: the device frame path (parallel/frame_path.h) converts decoded planes to the
// model's RGB and the model's RGB to the encoder's planes from these facts alone; the scheduler
// fills them from io::YuvImage and the writer's target.
//
// YuvLayout: one frame's planes back to back in one buffer, each row `stride` bytes (the packed
// layout the frame path moves between host and device in one copy per slice).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wm {

// The YCbCr matrix (its Kr, Kb coefficients). BT.2020 constant luminance is taken as BT.2020
// non-constant, as libswscale does.
enum class YuvMatrix { kBt601, kBt709, kBt2020, kFcc, kSmpte240m };
const char* to_string(YuvMatrix m);
// Kr and Kb of the matrix.
void yuv_coefficients(YuvMatrix m, double& kr, double& kb);

struct YuvFormat {
  int width = 0;  // luma samples
  int height = 0;
  int depth = 8;    // significant bits per sample (8..16)
  int shift_x = 0;  // chroma subsampling as shifts (4:2:0: 1, 1; 4:2:2: 1, 0; 4:4:4: 0, 0)
  int shift_y = 0;
  bool semi_planar = false;  // U and V interleaved in plane 1 (NV12, P010, P016); else 3 planes
  int sample_shift = 0;      // samples stored shifted left by this (P010: 6)
  YuvMatrix matrix = YuvMatrix::kBt709;
  bool full_range = false;  // full ("jpeg") or limited ("tv", 16..235 / 16..240 at 8 bits)
  // Where chroma samples sit, in luma samples from the first luma sample of their block: 0.5 is
  // centred (what libswscale assumes when no position is given, and JPEG's siting); 0 is
  // co-sited with the left (top) luma sample (MPEG-2/H.264 4:2:0 horizontally). Only matters on a
  // subsampled axis.
  double chroma_x = 0.5;
  double chroma_y = 0.5;

  int bytes_per_sample() const { return depth + sample_shift > 8 ? 2 : 1; }
  int chroma_width() const { return -((-width) >> shift_x); }
  int chroma_height() const { return -((-height) >> shift_y); }
  int planes() const { return semi_planar ? 2 : 3; }
  // Samples in a row of plane p (semi-planar chroma: U and V both) and its rows.
  int plane_row_samples(int p) const;
  int plane_rows(int p) const;
  // "yuv420p 8-bit bt709 limited 1920x1080" (logs).
  std::string describe() const;
};

// A frame's planes back to back: plane p at `offset[p]`, rows `stride[p]` bytes apart (a
// multiple of `align`, itself a multiple of 2), `frame_bytes` in all (a multiple of `align`).
struct YuvLayout {
  size_t offset[3] = {0, 0, 0};
  size_t stride[3] = {0, 0, 0};
  size_t frame_bytes = 0;
};
YuvLayout yuv_layout(const YuvFormat& format, size_t align);

// One picture's planes in memory, by reference (decoded frames, encoder pictures).
struct YuvPlanes {
  const uint8_t* data[3] = {nullptr, nullptr, nullptr};
  std::ptrdiff_t stride[3] = {0, 0, 0};
};

// Copies the picture `in` into the packed layout at `out` (rows of plane_row_samples ×
// bytes_per_sample bytes; padding bytes left as they are).
void pack_planes(const YuvFormat& format, const YuvPlanes& in, const YuvLayout& layout,
                 uint8_t* out);

}  // namespace wm
