#include "io/yuv_image.h"

#include <cstring>

#include "io/pixel_convert.h"

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace wm::io {
namespace {

// Planar, little-endian, no palette, alpha, RGB, float or Bayer: what both YUV readers take.
bool plain_planar(const AVPixFmtDescriptor* desc) {
  constexpr uint64_t kRefused = AV_PIX_FMT_FLAG_BE | AV_PIX_FMT_FLAG_PAL |
                                AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL |
                                AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_ALPHA |
                                AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_BAYER;
  return !(desc->flags & kRefused) && (desc->flags & AV_PIX_FMT_FLAG_PLANAR);
}

}  // namespace

bool yuv_native_format(int format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(format));
  if (!desc || desc->nb_components != 3) return false;
  if (!plain_planar(desc)) return false;
  const int depth = desc->comp[0].depth;
  const int bytes = depth > 8 ? 2 : 1;
  if (depth < 8 || depth > 16) return false;
  for (int c = 0; c < 3; ++c) {
    const AVComponentDescriptor& comp = desc->comp[c];
    if (comp.plane != c || comp.depth != depth || comp.step != bytes || comp.offset != 0 ||
        comp.shift != 0) {
      return false;
    }
  }
  return true;
}

bool yuv_device_format(int format) {
  if (yuv_native_format(format)) return true;
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(format));
  if (!desc || desc->nb_components != 3) return false;
  if (!plain_planar(desc)) return false;
  const AVComponentDescriptor& y = desc->comp[0];
  const int bytes = y.depth + y.shift > 8 ? 2 : 1;
  if (y.depth < 8 || y.depth + y.shift > 16 || y.plane != 0 || y.step != bytes || y.offset != 0) {
    return false;
  }
  // U then V interleaved in plane 1 (NV21's V-first order is not taken).
  const AVComponentDescriptor& u = desc->comp[1];
  const AVComponentDescriptor& v = desc->comp[2];
  return u.plane == 1 && v.plane == 1 && u.step == 2 * bytes && v.step == 2 * bytes &&
         u.offset == 0 && v.offset == bytes && u.depth == y.depth && v.depth == y.depth &&
         u.shift == y.shift && v.shift == y.shift;
}

int pixel_format_id(const std::string& name) {
  return name.empty() ? -1 : int(av_get_pix_fmt(name.c_str()));
}

void chroma_shifts(int format, int& x, int& y) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(format));
  x = desc ? desc->log2_chroma_w : 0;
  y = desc ? desc->log2_chroma_h : 0;
}

int yuv_range(int format, int color_range) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(format));
  return desc && std::strncmp(desc->name, "yuvj", 4) == 0 ? int(AVCOL_RANGE_JPEG) : color_range;
}

YuvMatrix yuv_matrix(int colorspace, int height) {
  switch (effective_colorspace(colorspace, height)) {
    case AVCOL_SPC_BT709:
      return YuvMatrix::kBt709;
    case AVCOL_SPC_FCC:
      return YuvMatrix::kFcc;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M:
      return YuvMatrix::kBt601;
    case AVCOL_SPC_SMPTE240M:
      return YuvMatrix::kSmpte240m;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL:
      return YuvMatrix::kBt2020;
    default:
      return YuvMatrix::kBt709;
  }
}

void chroma_siting(int chroma_location, double& x, double& y) {
  x = 0.5, y = 0.5;
  switch (chroma_location) {
    case AVCHROMA_LOC_LEFT:
      x = 0;
      break;
    case AVCHROMA_LOC_TOPLEFT:
      x = 0, y = 0;
      break;
    case AVCHROMA_LOC_TOP:
      y = 0;
      break;
    case AVCHROMA_LOC_BOTTOMLEFT:
      x = 0, y = 1;
      break;
    case AVCHROMA_LOC_BOTTOM:
      y = 1;
      break;
    default:
      break;
  }
}

YuvFormat yuv_format_of(const YuvImage& image) {
  YuvFormat f;
  f.width = image.width;
  f.height = image.height;
  f.depth = image.depth;
  f.shift_x = image.chroma_shift_x;
  f.shift_y = image.chroma_shift_y;
  f.semi_planar = image.semi_planar;
  f.sample_shift = image.sample_shift;
  f.matrix = yuv_matrix(image.colorspace, image.height);
  f.full_range = image.color_range == AVCOL_RANGE_JPEG;
  chroma_siting(image.chroma_location, f.chroma_x, f.chroma_y);
  return f;
}

}  // namespace wm::io
