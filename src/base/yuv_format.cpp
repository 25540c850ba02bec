#include "src/base/yuv_format.h"

#include <cstdio>
#include <cstring>

namespace wm {

const char* to_string(YuvMatrix m) {
  switch (m) {
    case YuvMatrix::kBt601:
      return "bt601";
    case YuvMatrix::kBt709:
      return "bt709";
    case YuvMatrix::kBt2020:
      return "bt2020";
    case YuvMatrix::kFcc:
      return "fcc";
    case YuvMatrix::kSmpte240m:
      return "smpte240m";
  }
  return "?";
}

void yuv_coefficients(YuvMatrix m, double& kr, double& kb) {
  switch (m) {
    case YuvMatrix::kBt601:
      kr = 0.299, kb = 0.114;
      return;
    case YuvMatrix::kBt709:
      kr = 0.2126, kb = 0.0722;
      return;
    case YuvMatrix::kBt2020:
      kr = 0.2627, kb = 0.0593;
      return;
    case YuvMatrix::kFcc:
      kr = 0.30, kb = 0.11;
      return;
    case YuvMatrix::kSmpte240m:
      kr = 0.212, kb = 0.087;
      return;
  }
  kr = 0.2126, kb = 0.0722;
}

int YuvFormat::plane_row_samples(int p) const {
  if (p == 0) return width;
  return semi_planar ? 2 * chroma_width() : chroma_width();
}

int YuvFormat::plane_rows(int p) const { return p == 0 ? height : chroma_height(); }

std::string YuvFormat::describe() const {
  const char* sub = shift_x && shift_y ? "4:2:0" : shift_x ? "4:2:2" : "4:4:4";
  std::string siting;
  if ((shift_x && chroma_x != 0.5) || (shift_y && chroma_y != 0.5)) {
    char text[48];
    std::snprintf(text, sizeof(text), " (chroma at %g,%g)", shift_x ? chroma_x : 0.5,
                  shift_y ? chroma_y : 0.5);
    siting = text;
  }
  return std::string(sub) + (semi_planar ? " semi-planar " : " ") + std::to_string(depth) +
         "-bit " + to_string(matrix) + (full_range ? " full " : " limited ") +
         std::to_string(width) + "x" + std::to_string(height) + siting;
}

YuvLayout yuv_layout(const YuvFormat& format, size_t align) {
  if (align < 2) align = 2;
  auto up = [align](size_t v) { return (v + align - 1) / align * align; };
  YuvLayout layout;
  size_t at = 0;
  for (int p = 0; p < format.planes(); ++p) {
    layout.offset[p] = at;
    layout.stride[p] = up(size_t(format.plane_row_samples(p)) * size_t(format.bytes_per_sample()));
    at += layout.stride[p] * size_t(format.plane_rows(p));
  }
  layout.frame_bytes = up(at);
  return layout;
}

void pack_planes(const YuvFormat& format, const YuvPlanes& in, const YuvLayout& layout,
                 uint8_t* out) {
  for (int p = 0; p < format.planes(); ++p) {
    const size_t row = size_t(format.plane_row_samples(p)) * size_t(format.bytes_per_sample());
    const int rows = format.plane_rows(p);
    uint8_t* to = out + layout.offset[p];
    if (in.stride[p] == std::ptrdiff_t(layout.stride[p]) && row == layout.stride[p]) {
      std::memcpy(to, in.data[p], row * size_t(rows));
      continue;
    }
    for (int y = 0; y < rows; ++y) {
      std::memcpy(to + size_t(y) * layout.stride[p], in.data[p] + std::ptrdiff_t(y) * in.stride[p],
                  row);
    }
  }
}

}  // namespace wm
