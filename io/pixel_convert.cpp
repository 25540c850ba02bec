#include "io/pixel_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/av_enum.h"
#include "src/base/error.h"

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace wm::io {

// Measured on the 2-core dev VM (AMD EPYC Zen 4), swscale 6.7, 2 slice threads, per frame:
//   1080p yuv420p → gbrpf32: point 2.8 ms, bilinear+accurate_rnd 3.2 ms (1 thread: 6 ms)
//   4K gbrpf32 → yuv420p:   point 10 ms, bilinear 12.5 ms, bilinear+accurate_rnd 14 ms
//                            (1 thread: 19 / 24 / 23 ms)
// The filter only resamples chroma here (same size); bilinear avoids the chroma aliasing of
// point sampling, and accurate rounding keeps flat colours exact through a round trip, for a
// few ms per 4K frame next to ~100+ ms of x264 veryfast encode on the same cores.
const int kDecodeSwsFlags = SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT;
const int kEncodeSwsFlags = SWS_BILINEAR | SWS_ACCURATE_RND;
// Narrower decoded frames are converted through a padded frame (FrameToPlanar::convert).
const int kSwsMinDirectWidth = 8;

namespace {

void noop_free(void*, uint8_t*) {}

// Points a GBRPF32 AVFrame at a Planar's memory without copying. libswscale's frame API takes a
// reference to its frames, so the planes are wrapped in a non-owning AVBufferRef; the frame must
// be unreferenced before the Planar goes away (the converters do so before returning).
// libswscale's GBRP plane order is G, B, R; Planar's is R, G, B.
// `width`/`height` (0: the Planar's) may be smaller than the Planar: its top-left part.
void wrap_planar(const Planar& planar, AVFrame* frame, bool writable, int width = 0,
                 int height = 0) {
  frame->format = AV_PIX_FMT_GBRPF32;
  frame->width = width > 0 ? width : planar.width;
  frame->height = height > 0 ? height : planar.height;
  auto* base = reinterpret_cast<uint8_t*>(const_cast<float*>(planar.data.data()));
  frame->buf[0] = av_buffer_create(base, planar.data.size() * sizeof(float), noop_free, nullptr,
                                   writable ? 0 : AV_BUFFER_FLAG_READONLY);
  if (!frame->buf[0]) throw std::bad_alloc();
  const int order[3] = {1, 2, 0};
  for (int i = 0; i < 3; ++i) {
    frame->data[i] = reinterpret_cast<uint8_t*>(const_cast<float*>(planar.plane(order[i], 0)));
    frame->linesize[i] = planar.width * int(sizeof(float));
  }
}

// Formats deprecated in favour of color_range: map to the plain format plus full range.
AVPixelFormat unjpeg(AVPixelFormat format, int& range) {
  switch (format) {
    case AV_PIX_FMT_YUVJ420P:
      range = AVCOL_RANGE_JPEG;
      return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P:
      range = AVCOL_RANGE_JPEG;
      return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P:
      range = AVCOL_RANGE_JPEG;
      return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P:
      range = AVCOL_RANGE_JPEG;
      return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P:
      range = AVCOL_RANGE_JPEG;
      return AV_PIX_FMT_YUV411P;
    default:
      return format;
  }
}

SwsContextPtr make_sws(int width, int height, AVPixelFormat src, int src_full, AVPixelFormat dst,
                       int dst_full, int colorspace, int flags, int threads) {
  SwsContextPtr sws(sws_alloc_context());
  if (!sws) throw std::bad_alloc();
  SwsContext* c = sws.get();
  av_opt_set_int(c, "srcw", width, 0);
  av_opt_set_int(c, "srch", height, 0);
  av_opt_set_int(c, "src_format", src, 0);
  av_opt_set_int(c, "dstw", width, 0);
  av_opt_set_int(c, "dsth", height, 0);
  av_opt_set_int(c, "dst_format", dst, 0);
  av_opt_set_int(c, "sws_flags", flags, 0);
  av_opt_set_int(c, "threads", threads, 0);
  av_opt_set_int(c, "src_range", src_full, 0);
  av_opt_set_int(c, "dst_range", dst_full, 0);
  const std::string what =
      std::string(av_get_pix_fmt_name(src)) + " -> " + av_get_pix_fmt_name(dst);
  av_check(sws_init_context(c, nullptr, nullptr), "sws_init_context", what, kExitSoftware);
  const int* coefficients = sws_getCoefficients(colorspace);
  // Also reaches the per-slice contexts when threaded.
  sws_setColorspaceDetails(c, coefficients, src_full, coefficients, dst_full, 0, 1 << 16, 1 << 16);
  return sws;
}

}  // namespace

int effective_colorspace(int colorspace, int height) {
  switch (colorspace) {
    case AVCOL_SPC_BT709:
    case AVCOL_SPC_FCC:
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M:
    case AVCOL_SPC_SMPTE240M:
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL:
      return colorspace;
    default:
      return height >= 720 ? AVCOL_SPC_BT709 : AVCOL_SPC_SMPTE170M;
  }
}

bool is_rgb_format(AVPixelFormat format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  if (!desc) return false;
  return (desc->flags & AV_PIX_FMT_FLAG_RGB) || desc->nb_components <= 2;
}

int format_bit_depth(AVPixelFormat format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  return desc ? desc->comp[0].depth : 8;
}

bool has_alpha(AVPixelFormat format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  return desc && (desc->flags & AV_PIX_FMT_FLAG_ALPHA) &&
         !(desc->flags & (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_FLOAT |
                          AV_PIX_FMT_FLAG_BITSTREAM)) &&
         desc->comp[desc->nb_components - 1].depth <= 16;
}

// PAL8: data[0] holds indices, data[1] 256 palette entries, native uint32 0xAARRGGBB.
static bool palette_has_alpha(const AVFrame& frame) {
  if (frame.format != AV_PIX_FMT_PAL8 || !frame.data[1]) return false;
  const auto* palette = reinterpret_cast<const uint32_t*>(frame.data[1]);
  return std::any_of(palette, palette + 256, [](uint32_t c) { return (c >> 24) != 0xff; });
}

bool frame_has_alpha(const AVFrame& frame) {
  return has_alpha(AVPixelFormat(frame.format)) || palette_has_alpha(frame);
}

FormatFamily format_family(const AVFrame& frame) {
  FormatFamily f;
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(frame.format));
  if (!desc) return f;
  const bool palette = desc->flags & AV_PIX_FMT_FLAG_PAL;
  f.depth = palette ? 8 : desc->comp[0].depth;
  f.gray = !palette && desc->nb_components <= 2;
  f.alpha = frame_has_alpha(frame);
  return f;
}

std::string FormatFamily::describe() const {
  return std::to_string(depth) + "-bit " + (gray ? "gray" : "colour") +
         (alpha ? " with alpha" : "");
}

void read_alpha(const AVFrame& frame, Planar& out) {
  const AVPixelFormat format = AVPixelFormat(frame.format);
  if (palette_has_alpha(frame)) {
    if (out.channels != 1 || out.frames != 1 || out.height != frame.height ||
        out.width != frame.width) {
      out = Planar(1, 1, frame.height, frame.width);
    }
    const auto* palette = reinterpret_cast<const uint32_t*>(frame.data[1]);
    for (int y = 0; y < frame.height; ++y) {
      const uint8_t* index = frame.data[0] + size_t(y) * size_t(frame.linesize[0]);
      float* dst = out.plane(0, 0) + size_t(y) * frame.width;
      for (int x = 0; x < frame.width; ++x) dst[x] = float(palette[index[x]] >> 24) / 255.0f;
    }
    return;
  }
  if (!has_alpha(format)) return;
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  const int c = desc->nb_components - 1;
  if (out.channels != 1 || out.frames != 1 || out.height != frame.height ||
      out.width != frame.width) {
    out = Planar(1, 1, frame.height, frame.width);
  }
  const float scale = 1.0f / float((1 << desc->comp[c].depth) - 1);
  std::vector<uint16_t> line(frame.width);
  for (int y = 0; y < frame.height; ++y) {
    av_read_image_line2(line.data(), const_cast<const uint8_t**>(frame.data), frame.linesize, desc,
                        0, y, c, frame.width, 0, 2);
    float* dst = out.plane(0, 0) + size_t(y) * frame.width;
    for (int x = 0; x < frame.width; ++x) dst[x] = float(line[x]) * scale;
  }
}

void write_alpha(const Planar* alpha, AVFrame& frame) {
  const AVPixelFormat format = AVPixelFormat(frame.format);
  if (!has_alpha(format)) return;
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  const int c = desc->nb_components - 1;
  const int plane = desc->comp[c].plane;
  const int max = (1 << desc->comp[c].depth) - 1;
  const bool given = alpha && !alpha->empty();
  if (given && (alpha->width < frame.width || alpha->height < frame.height)) {
    throw Error("alpha plane " + std::to_string(alpha->width) + "x" +
                    std::to_string(alpha->height) + " is smaller than the frame",
                kExitSoftware);
  }
  // av_write_image_line2() ORs samples into place, so the row of the alpha's plane is cleared
  // and every component stored in it (packed formats: all of them) written back.
  std::vector<int> shared;  // components in the alpha's plane, alpha last
  for (int k = 0; k < desc->nb_components; ++k) {
    if (desc->comp[k].plane == plane) shared.push_back(k);
  }
  const int row_bytes = av_image_get_linesize(format, frame.width, plane);
  std::vector<std::vector<uint16_t>> lines(shared.size(), std::vector<uint16_t>(frame.width));
  for (int y = 0; y < frame.height; ++y) {
    for (size_t i = 0; i + 1 < shared.size(); ++i) {
      av_read_image_line2(lines[i].data(), const_cast<const uint8_t**>(frame.data), frame.linesize,
                          desc, 0, y, shared[i], frame.width, 0, 2);
    }
    std::vector<uint16_t>& line = lines.back();
    if (given) {
      const float* src = alpha->plane(0, 0) + size_t(y) * alpha->width;
      for (int x = 0; x < frame.width; ++x) {
        line[x] = uint16_t(std::lround(std::min(1.0f, std::max(0.0f, src[x])) * float(max)));
      }
    } else {
      std::fill(line.begin(), line.end(), uint16_t(max));
    }
    std::memset(frame.data[plane] + ptrdiff_t(y) * frame.linesize[plane], 0, size_t(row_bytes));
    for (size_t i = 0; i < shared.size(); ++i) {
      av_write_image_line2(lines[i].data(), frame.data, frame.linesize, desc, 0, y, shared[i],
                           frame.width, 2);
    }
  }
}

namespace {

// RGB and gray sources: libswscale's generic path would take them through its internal YUV at
// 15 bits (8-bit sources), losing up to a level; reading the samples directly is exact.
bool direct_format(AVPixelFormat format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  return desc && is_rgb_format(format) &&
         !(desc->flags & (AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM |
                          AV_PIX_FMT_FLAG_HWACCEL)) &&
         desc->comp[0].depth <= 16;
}

// A palette image, each index looked up (exact; libswscale would pass it through YUV).
void convert_palette(const AVFrame& frame, Planar& out) {
  const auto* palette = reinterpret_cast<const uint32_t*>(frame.data[1]);
  for (int y = 0; y < frame.height; ++y) {
    const uint8_t* index = frame.data[0] + size_t(y) * size_t(frame.linesize[0]);
    const size_t row = size_t(y) * frame.width;
    for (int x = 0; x < frame.width; ++x) {
      const uint32_t c = palette[index[x]];
      out.plane(0, 0)[row + x] = float((c >> 16) & 0xff) / 255.0f;
      out.plane(1, 0)[row + x] = float((c >> 8) & 0xff) / 255.0f;
      out.plane(2, 0)[row + x] = float(c & 0xff) / 255.0f;
    }
  }
}

void convert_direct(const AVFrame& frame, int range, Planar& out) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(frame.format));
  const int depth = desc->comp[0].depth;
  const bool gray = desc->nb_components <= 2;
  // Gray is full range unless tagged limited; RGB is always read as full range.
  const bool limited = gray && range == AVCOL_RANGE_MPEG;
  const float offset = limited ? float(16 << (depth - 8)) : 0.0f;
  const float scale = 1.0f / (limited ? float(219 << (depth - 8)) : float((1 << depth) - 1));
  std::vector<uint16_t> line(frame.width);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < frame.height; ++y) {
      float* dst = out.plane(c, 0) + size_t(y) * frame.width;
      if (gray && c > 0) {
        std::copy_n(out.plane(0, 0) + size_t(y) * frame.width, frame.width, dst);
        continue;
      }
      av_read_image_line2(line.data(), const_cast<const uint8_t**>(frame.data), frame.linesize,
                          desc, 0, y, c, frame.width, 0, 2);
      for (int x = 0; x < frame.width; ++x) {
        dst[x] = std::min(1.0f, std::max(0.0f, (float(line[x]) - offset) * scale));
      }
    }
  }
}

}  // namespace

void FrameToPlanar::convert(const AVFrame& frame, Planar& out, Planar* alpha) {
  if (out.channels != 3 || out.frames != 1 || out.height != frame.height ||
      out.width != frame.width) {
    out = Planar(3, 1, frame.height, frame.width);
  }
  if (alpha) {
    if (frame_has_alpha(frame)) {
      read_alpha(frame, *alpha);
    } else {
      *alpha = Planar();
    }
  }
  int range = known_color_range(frame.color_range);
  const AVPixelFormat format = unjpeg(AVPixelFormat(frame.format), range);
  if (format == AV_PIX_FMT_PAL8) return convert_palette(frame, out);
  if (direct_format(format)) return convert_direct(frame, range, out);
  const bool rgb = is_rgb_format(format);
  const int colorspace =
      rgb ? AVCOL_SPC_RGB : effective_colorspace(known_color_space(frame.colorspace), frame.height);
  if (!sws_ || frame.width != width_ || frame.height != height_ || format != format_ ||
      colorspace != colorspace_ || range != range_) {
    const int src_full = range == AVCOL_RANGE_JPEG || rgb;
    sws_ = make_sws(frame.width, frame.height, format, src_full, AV_PIX_FMT_GBRPF32, 1,
                    rgb ? AVCOL_SPC_BT709 : colorspace, kDecodeSwsFlags, threads_);
    width_ = frame.width;
    height_ = frame.height;
    format_ = format;
    colorspace_ = colorspace;
    range_ = range;
  }
  FramePtr src = make_frame();
  av_check(av_frame_ref(src.get(), &frame), "av_frame_ref", "decoded frame");
  src->format = format;  // yuvj* → yuv* (same layout)
  FramePtr dst = make_frame();
  if (frame.width >= kSwsMinDirectWidth) {
    wrap_planar(out, dst.get(), true);
    av_check(sws_scale_frame(sws_.get(), dst.get(), src.get()), "sws_scale_frame", "decoded frame",
             kExitSoftware);
    return;
  }
  // libswscale 6.7 writes up to 20 bytes past the rows of a GBRPF32 picture 1 or 2 pixels wide:
  // into the next plane when the planes are packed as in a Planar (wrong colours; found by
  // fuzzing, docs/testing.md). Such frames go through a padded frame of libav's own.
  dst->format = AV_PIX_FMT_GBRPF32;
  dst->width = frame.width;
  dst->height = frame.height;
  av_check(av_frame_get_buffer(dst.get(), 0), "av_frame_get_buffer", "decoded frame",
           kExitSoftware);
  av_check(sws_scale_frame(sws_.get(), dst.get(), src.get()), "sws_scale_frame", "decoded frame",
           kExitSoftware);
  const int order[3] = {1, 2, 0};  // GBRP planes → R, G, B
  for (int i = 0; i < 3; ++i) {
    float* plane = out.plane(order[i], 0);
    for (int y = 0; y < frame.height; ++y) {
      std::memcpy(plane + size_t(y) * frame.width, dst->data[i] + size_t(y) * dst->linesize[i],
                  size_t(frame.width) * sizeof(float));
    }
  }
}

namespace {

// RGB formats written sample by sample (see direct_format; gray needs a matrix).
bool direct_output(AVPixelFormat format) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  return direct_format(format) && desc->nb_components >= 3;
}

void convert_direct_out(const Planar& in, int width, int height, AVFrame& out) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(out.format));
  // av_write_image_line2() ORs samples into place: clear the picture first.
  for (int p = 0; p < 4 && out.data[p]; ++p) {
    const int rows = p == 0 || p == 3 || !(desc->flags & AV_PIX_FMT_FLAG_PLANAR)
                         ? height
                         : AV_CEIL_RSHIFT(height, desc->log2_chroma_h);
    std::memset(out.data[p], 0, size_t(out.linesize[p]) * size_t(rows));
  }
  std::vector<uint16_t> line(width);
  for (int c = 0; c < 3; ++c) {
    const float max = float((1 << desc->comp[c].depth) - 1);
    for (int y = 0; y < height; ++y) {
      const float* src = in.plane(c, 0) + size_t(y) * in.width;
      for (int x = 0; x < width; ++x) {
        line[x] = uint16_t(std::lround(std::min(1.0f, std::max(0.0f, src[x])) * max));
      }
      av_write_image_line2(line.data(), out.data, out.linesize, desc, 0, y, c, width, 2);
    }
  }
}

}  // namespace

PlanarToFrame::PlanarToFrame(int width, int height, AVPixelFormat format, int colorspace, int range,
                             int threads)
    : width_(width), height_(height), in_width_(width), in_height_(height) {
  if (direct_output(format)) return;
  int out_range = range;
  const AVPixelFormat plain = unjpeg(format, out_range);
  const bool rgb = is_rgb_format(plain);
  const int dst_full = rgb ? out_range != AVCOL_RANGE_MPEG : out_range == AVCOL_RANGE_JPEG;
  sws_ = make_sws(width, height, AV_PIX_FMT_GBRPF32, 1, format, dst_full,
                  rgb ? AVCOL_SPC_BT709 : effective_colorspace(colorspace, height), kEncodeSwsFlags,
                  threads);
}

void PlanarToFrame::crop_from(int in_width, int in_height) {
  in_width_ = std::max(in_width, width_);
  in_height_ = std::max(in_height, height_);
}

void PlanarToFrame::convert(const Planar& in, AVFrame& out, const Planar* alpha) {
  if (in.channels != 3 || in.frames != 1 || in.height != in_height_ || in.width != in_width_) {
    throw Error("frame shape [" + std::to_string(in.channels) + "," + std::to_string(in.frames) +
                    "," + std::to_string(in.height) + "," + std::to_string(in.width) +
                    "] does not match the output size " + std::to_string(in_width_) + "x" +
                    std::to_string(in_height_),
                kExitSoftware);
  }
  if (!sws_) {
    convert_direct_out(in, width_, height_, out);
  } else {
    FramePtr src = make_frame();
    wrap_planar(in, src.get(), false, width_, height_);
    av_check(sws_scale_frame(sws_.get(), &out, src.get()), "sws_scale_frame", "output frame",
             kExitSoftware);
  }
  write_alpha(alpha, out);
}

}  // namespace wm::io
