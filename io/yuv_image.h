// YuvImage: a picture in its own planar YUV pixel format, by reference (no libav types): how the
// built-in resamplers' YUV-native path takes decoded frames from VideoReader::read_yuv() and hands
// frames to VideoWriter::write_yuv() without converting to RGB float and back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/yuv_format.h"

namespace wm::io {

struct YuvImage {
  int width = 0;  // luma size
  int height = 0;
  int format = -1;         // the AVPixelFormat value
  int depth = 8;           // bits per sample: uint8_t when 8, native-endian uint16_t when 9..16
  int chroma_shift_x = 0;  // chroma planes are width >> shift (rounded up), likewise heights
  int chroma_shift_y = 0;
  int colorspace = 2;  // the frame's AVColorSpace and AVColorRange tags (2, 0: unspecified)
  int color_range = 0;
  // Semi-planar formats (yuv_device_format: NV12, P010, ...): U and V interleaved in plane 1,
  // data[2] null; samples stored shifted left by `sample_shift` bits (P010: 6).
  bool semi_planar = false;
  int sample_shift = 0;
  int chroma_location = 0;                         // the frame's AVChromaLocation (0: unspecified)
  uint8_t* data[3] = {nullptr, nullptr, nullptr};  // Y, U, V
  std::ptrdiff_t stride[3] = {0, 0, 0};            // bytes between rows
  std::shared_ptr<void> owner;                     // keeps the memory alive (an AVFrame)

  bool empty() const { return !owner; }
  int plane_width(int p) const { return p == 0 ? width : -((-width) >> chroma_shift_x); }
  int plane_height(int p) const { return p == 0 ? height : -((-height) >> chroma_shift_y); }
};

// True for the formats YuvImage holds: planar YUV with three planes (no alpha), 8 to 16 bits,
// native endian (yuv420p, yuv422p, yuv444p, yuv420p10le, yuvj420p, ...).
bool yuv_native_format(int format);
// yuv_native_format, and the semi-planar formats NVDEC hands over (NV12, P010, P016, NV16, NV24,
// ...: two planes, 8 to 16 bits with any left shift): what the device frame path takes.
bool yuv_device_format(int format);
// The AVPixelFormat value of a format name ("yuv420p"), -1 when libav has none.
int pixel_format_id(const std::string& name);
// Chroma subsampling of a pixel format as shifts (yuv420p: 1, 1).
void chroma_shifts(int format, int& x, int& y);
// The AVColorRange a frame of `format` tagged `color_range` is read with: full ("jpeg") for the
// yuvj* formats, else the tag.
int yuv_range(int format, int color_range);

// The matrix of an AVColorSpace value as the host path converts it (io/pixel_convert.h's rule:
// an unspecified or unknown matrix is BT.709 from 720 rows up, BT.601 below).
YuvMatrix yuv_matrix(int colorspace, int height);
// Chroma siting of an AVChromaLocation in luma samples (YuvFormat::chroma_x, chroma_y); centred
// (libswscale's assumption, so the host path's) when unspecified.
void chroma_siting(int chroma_location, double& x, double& y);
// The YuvFormat of a decoded picture: its layout, the matrix and range the host path would read
// it with, its chroma siting.
YuvFormat yuv_format_of(const YuvImage& image);

}  // namespace wm::io
