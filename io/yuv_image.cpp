#include "io/yuv_image.h"

#include <cstring>

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace wm::io {

bool yuv_native_format(int format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(format));
  if (!desc || desc->nb_components != 3) return false;
  constexpr uint64_t kRefused = AV_PIX_FMT_FLAG_BE | AV_PIX_FMT_FLAG_PAL |
                                AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL |
                                AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_ALPHA |
                                AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_BAYER;
  if ((desc->flags & kRefused) || !(desc->flags & AV_PIX_FMT_FLAG_PLANAR)) return false;
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

}  // namespace wm::io
