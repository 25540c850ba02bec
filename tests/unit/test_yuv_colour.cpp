// The device frame path's colour conversions (src/models/torch/yuv_colour.h), run on the CPU,
// against libswscale as the host path calls it (io::FrameToPlanar, io::PlanarToFrame), for every
// format the path takes: 8/10-bit, 4:2:0/4:2:2/4:4:4, BT.601/709/2020, full/limited range; chroma
// siting against libswscale given the same chroma positions; semi-planar NV12/P010 against their
// planar twins; the ordered dither. The tolerances (stated in docs/performance.md):
//   YUV → RGB: every value within 1/255 of libswscale's, 0.5/255 on average;
//   RGB → YUV: every sample within 1 code of libswscale's (rounding; dither off), 4 codes for
//   10-bit limited range (libswscale's scale there is not BT.709/2020's; ours is).
// tests/unit/test_yuv_colour_gpu.cpp checks the device against the CPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "io/av_handles.h"
#include "io/pixel_convert.h"
#include "src/models/torch/yuv_colour.h"

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

namespace wm {
namespace {

struct Case {
  const char* pix_fmt;
  YuvMatrix matrix;
  bool full;
};

int colorspace_of(YuvMatrix m) {
  switch (m) {
    case YuvMatrix::kBt601:
      return AVCOL_SPC_SMPTE170M;
    case YuvMatrix::kBt2020:
      return AVCOL_SPC_BT2020_NCL;
    default:
      return AVCOL_SPC_BT709;
  }
}

YuvFormat format_of(AVPixelFormat pix, int width, int height, YuvMatrix matrix, bool full) {
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(pix);
  YuvFormat f;
  f.width = width;
  f.height = height;
  f.depth = d->comp[0].depth;
  f.shift_x = d->log2_chroma_w;
  f.shift_y = d->log2_chroma_h;
  f.semi_planar = d->comp[1].plane == d->comp[2].plane;
  f.sample_shift = d->comp[0].shift;
  f.matrix = matrix;
  f.full_range = full;
  return f;
}

// A picture with smooth gradients, a hard vertical edge and a hard horizontal one, in the
// format's codes (legal range for limited).
io::FramePtr make_picture(const YuvFormat& f, AVPixelFormat pix, int seed) {
  io::FramePtr frame = io::make_frame();
  frame->format = pix;
  frame->width = f.width;
  frame->height = f.height;
  EXPECT_GE(av_frame_get_buffer(frame.get(), 0), 0);
  const int max = (1 << f.depth) - 1;
  const double s = double(1 << (f.depth - 8));
  auto code = [&](double v, bool luma) {  // v in [0,1]
    const double lo = f.full_range ? 0 : 16 * s;
    const double hi = f.full_range ? max : (luma ? 235 : 240) * s;
    return int(std::lround(lo + v * (hi - lo)));
  };
  auto put = [&](int plane, int x, int y, int comp_step, int offset, int value) {
    uint8_t* row = frame->data[plane] + std::ptrdiff_t(y) * frame->linesize[plane];
    const int v = value << f.sample_shift;
    if (f.bytes_per_sample() == 1) {
      row[x * comp_step + offset] = uint8_t(v);
    } else {
      uint16_t w = uint16_t(v);
      std::memcpy(row + (x * comp_step + offset) * 2, &w, 2);
    }
  };
  for (int y = 0; y < f.height; ++y) {
    for (int x = 0; x < f.width; ++x) {
      double v = 0.15 + 0.6 * x / f.width + 0.2 * y / f.height;
      if (x > f.width / 2 && x < f.width / 2 + 5) v = 0.9;
      if ((y + seed) % 23 == 0) v = 0.05;
      put(0, x, y, 1, 0, code(std::clamp(v, 0.0, 1.0), true));
    }
  }
  for (int y = 0; y < f.chroma_height(); ++y) {
    for (int x = 0; x < f.chroma_width(); ++x) {
      double u = 0.5 + 0.35 * std::sin(0.21 * x + 0.1 * seed) * std::cos(0.17 * y);
      double v = 0.5 - 0.3 * std::cos(0.13 * x) + 0.1 * std::sin(0.3 * y);
      if (x > f.chroma_width() / 3 && x < f.chroma_width() / 3 + 3) u = 0.1;
      u = std::clamp(u, 0.0, 1.0);
      v = std::clamp(v, 0.0, 1.0);
      if (f.semi_planar) {
        put(1, x, y, 2, 0, code(u, false));
        put(1, x, y, 2, 1, code(v, false));
      } else {
        put(1, x, y, 1, 0, code(u, false));
        put(2, x, y, 1, 0, code(v, false));
      }
    }
  }
  frame->colorspace = AVColorSpace(colorspace_of(f.matrix));
  frame->color_range = f.full_range ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
  return frame;
}

// The frame's planes packed as the converter takes them: [1, frame_bytes] uint8.
at::Tensor pack(const AVFrame& frame, const YuvFormat& f, size_t align) {
  const YuvLayout layout = yuv_layout(f, align);
  at::Tensor out = at::zeros({1, int64_t(layout.frame_bytes)}, at::kByte);
  YuvPlanes planes;
  for (int p = 0; p < 3; ++p) {
    planes.data[p] = frame.data[p];
    planes.stride[p] = frame.linesize[p];
  }
  pack_planes(f, planes, layout, out.data_ptr<uint8_t>());
  return out;
}

// Sample values of plane p of a packed frame (or of an AVFrame), as ints.
std::vector<int> samples_packed(const at::Tensor& packed, const YuvFormat& f, size_t align, int p) {
  const YuvLayout layout = yuv_layout(f, align);
  const uint8_t* base = packed.data_ptr<uint8_t>() + layout.offset[p];
  std::vector<int> out;
  for (int y = 0; y < f.plane_rows(p); ++y) {
    const uint8_t* row = base + size_t(y) * layout.stride[p];
    for (int x = 0; x < f.plane_row_samples(p); ++x) {
      int v = row[x];
      if (f.bytes_per_sample() == 2) v = row[2 * x] | (row[2 * x + 1] << 8);
      out.push_back(v >> f.sample_shift);
    }
  }
  return out;
}

std::vector<int> samples_frame(const AVFrame& frame, const YuvFormat& f, int p) {
  std::vector<int> out;
  for (int y = 0; y < f.plane_rows(p); ++y) {
    const uint8_t* row = frame.data[p] + std::ptrdiff_t(y) * frame.linesize[p];
    for (int x = 0; x < f.plane_row_samples(p); ++x) {
      int v = row[x];
      if (f.bytes_per_sample() == 2) v = row[2 * x] | (row[2 * x + 1] << 8);
      out.push_back(v >> f.sample_shift);
    }
  }
  return out;
}

struct Diff {
  double max = 0, mean = 0;
};

Diff rgb_diff(const at::Tensor& rgb, const Planar& ref) {
  // rgb [1,3,H,W] float; ref [3,1,H,W]
  const at::Tensor a = rgb.contiguous();
  const float* p = a.data_ptr<float>();
  Diff d;
  const size_t n = ref.data.size();
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(p[i]) - double(ref.data[i]));
    d.max = std::max(d.max, e);
    d.mean += e;
  }
  d.mean /= double(n);
  return d;
}

std::string name_of(const testing::TestParamInfo<Case>& info) {
  return std::string(info.param.pix_fmt) + "_" + to_string(info.param.matrix) +
         (info.param.full ? "_full" : "_limited");
}

class YuvColourVsSwscale : public testing::TestWithParam<Case> {};

TEST_P(YuvColourVsSwscale, ToRgbMatchesTheHostPath) {
  const Case c = GetParam();
  const AVPixelFormat pix = av_get_pix_fmt(c.pix_fmt);
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{64, 48}, {37, 21}}) {
    const YuvFormat f = format_of(pix, w, h, c.matrix, c.full);
    if ((f.shift_x && w % 2) || (f.shift_y && h % 2)) continue;  // the source decodes even sizes
    const io::FramePtr frame = make_picture(f, pix, 3);
    io::FrameToPlanar host(1);
    Planar ref;
    host.convert(*frame, ref);
    const models::YuvConverter conv(f, 2, at::kCPU);
    const at::Tensor rgb = conv.to_rgb(pack(*frame, f, 2), at::kFloat);
    const Diff d = rgb_diff(rgb, ref);
    // libswscale's float output steps by a level of the source (its integer pipeline), and at
    // 10 bits its limited range is scaled as 255ths of 65535 (white 943.4, not 940): within a
    // level of 255 everywhere, half a level on average.
    EXPECT_LE(d.max, 1.0 / 255.0 + 1e-4) << f.describe() << " mean " << d.mean;
    EXPECT_LE(d.mean, 0.5 / 255.0) << f.describe();
    std::printf("[to rgb] %-44s max %.2f mean %.3f (levels of 255)\n", f.describe().c_str(),
                d.max * 255, d.mean * 255);
  }
}

TEST_P(YuvColourVsSwscale, FromRgbMatchesTheHostPath) {
  const Case c = GetParam();
  const AVPixelFormat pix = av_get_pix_fmt(c.pix_fmt);
  const int w = 64, h = 48;
  const YuvFormat f = format_of(pix, w, h, c.matrix, c.full);
  // RGB with gradients, a hard edge and out-of-range values (clamped by both).
  Planar rgb(3, 1, h, w);
  for (int ch = 0; ch < 3; ++ch) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        double v = 0.5 + 0.45 * std::sin(0.11 * x * (ch + 1) + 0.07 * y);
        if (x > 20 && x < 24) v = ch == 1 ? 1.05 : -0.02;
        rgb.plane(ch, 0)[y * w + x] = float(v);
      }
    }
  }
  io::PlanarToFrame host(w, h, pix, colorspace_of(c.matrix),
                         c.full ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG, 1);
  io::FramePtr out = io::make_frame();
  out->format = pix;
  out->width = w;
  out->height = h;
  ASSERT_GE(av_frame_get_buffer(out.get(), 0), 0);
  host.convert(rgb, *out);
  const models::YuvConverter conv(f, 64, at::kCPU);
  const at::Tensor x =
      at::from_blob(rgb.data.data(), {3, 1, h, w}, at::kFloat).permute({1, 0, 2, 3}).contiguous();
  const at::Tensor packed = conv.from_rgb(x, /*dither=*/false);
  for (int p = 0; p < f.planes(); ++p) {
    const std::vector<int> ours = samples_packed(packed, f, 64, p);
    const std::vector<int> theirs = samples_frame(*out, f, p);
    ASSERT_EQ(ours.size(), theirs.size());
    int most = 0;
    double mean = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      most = std::max(most, std::abs(ours[i] - theirs[i]));
      mean += std::abs(ours[i] - theirs[i]);
    }
    mean /= double(ours.size());
    // Rounding; at 10 bits limited range, libswscale's scale (219/255 of 65535 for luma, 224/255
    // for chroma, not 219·256 and 224·256 as BT.709/2020 define it) puts it up to 3.4 codes
    // above the standard code values at white.
    const int bound = f.depth > 8 && !f.full_range ? 4 : 1;
    EXPECT_LE(most, bound) << f.describe() << " plane " << p;
    std::printf("[from rgb] %-42s plane %d max %d mean %.3f (levels)\n", f.describe().c_str(), p,
                most, mean);
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* pix :
       {"yuv420p", "yuv422p", "yuv444p", "yuv420p10le", "yuv422p10le", "yuv444p10le"}) {
    for (YuvMatrix m : {YuvMatrix::kBt601, YuvMatrix::kBt709, YuvMatrix::kBt2020}) {
      for (bool full : {false, true}) out.push_back({pix, m, full});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Formats, YuvColourVsSwscale, testing::ValuesIn(cases()), name_of);

// NV12 and P010 (NVDEC's) give the RGB of their planar twins, bit for bit.
TEST(YuvColour, SemiPlanarEqualsPlanar) {
  for (const auto& [semi, planar] : std::vector<std::pair<const char*, const char*>>{
           {"nv12", "yuv420p"}, {"p010le", "yuv420p10le"}, {"p016le", "yuv420p16le"}}) {
    const YuvFormat fs = format_of(av_get_pix_fmt(semi), 48, 32, YuvMatrix::kBt709, false);
    const YuvFormat fp = format_of(av_get_pix_fmt(planar), 48, 32, YuvMatrix::kBt709, false);
    ASSERT_TRUE(fs.semi_planar) << semi;
    const io::FramePtr a = make_picture(fs, av_get_pix_fmt(semi), 1);
    const io::FramePtr b = make_picture(fp, av_get_pix_fmt(planar), 1);
    const at::Tensor ra = models::YuvConverter(fs, 2, at::kCPU).to_rgb(pack(*a, fs, 2), at::kFloat);
    const at::Tensor rb = models::YuvConverter(fp, 2, at::kCPU).to_rgb(pack(*b, fp, 2), at::kFloat);
    EXPECT_TRUE(at::equal(ra, rb)) << semi;
    // And back: NV12 out interleaves the planar output's chroma.
    const at::Tensor pa = models::YuvConverter(fs, 64, at::kCPU).from_rgb(ra, false);
    const at::Tensor pb = models::YuvConverter(fp, 64, at::kCPU).from_rgb(rb, false);
    const std::vector<int> uv = samples_packed(pa, fs, 64, 1);
    const std::vector<int> u = samples_packed(pb, fp, 64, 1);
    const std::vector<int> v = samples_packed(pb, fp, 64, 2);
    ASSERT_EQ(uv.size(), 2 * u.size());
    for (size_t i = 0; i < u.size(); ++i) {
      ASSERT_EQ(uv[2 * i], u[i]) << semi << " U " << i;
      ASSERT_EQ(uv[2 * i + 1], v[i]) << semi << " V " << i;
    }
    EXPECT_EQ(samples_packed(pa, fs, 64, 0), samples_packed(pb, fp, 64, 0)) << semi;
  }
}

// Co-sited chroma (H.264's 4:2:0 default, MPEG-2) against libswscale given the same positions.
TEST(YuvColour, ChromaSitingMatchesSwscalePositions) {
  const AVPixelFormat pix = AV_PIX_FMT_YUV420P;
  for (const auto& [sx, sy, pos_x, pos_y] :
       std::vector<std::tuple<double, double, int, int>>{{0.0, 0.5, 0, 128}, {0.0, 0.0, 0, 0}}) {
    YuvFormat f = format_of(pix, 64, 48, YuvMatrix::kBt709, false);
    f.chroma_x = sx;
    f.chroma_y = sy;
    const io::FramePtr frame = make_picture(f, pix, 5);
    io::SwsContextPtr sws(sws_alloc_context());
    SwsContext* c = sws.get();
    av_opt_set_int(c, "srcw", 64, 0);
    av_opt_set_int(c, "srch", 48, 0);
    av_opt_set_int(c, "src_format", pix, 0);
    av_opt_set_int(c, "dstw", 64, 0);
    av_opt_set_int(c, "dsth", 48, 0);
    av_opt_set_int(c, "dst_format", AV_PIX_FMT_GBRPF32, 0);
    av_opt_set_int(c, "sws_flags", io::kDecodeSwsFlags, 0);
    av_opt_set_int(c, "src_h_chr_pos", pos_x, 0);
    av_opt_set_int(c, "src_v_chr_pos", pos_y, 0);
    av_opt_set_int(c, "src_range", 0, 0);
    av_opt_set_int(c, "dst_range", 1, 0);
    ASSERT_GE(sws_init_context(c, nullptr, nullptr), 0);
    const int* k = sws_getCoefficients(AVCOL_SPC_BT709);
    sws_setColorspaceDetails(c, k, 0, k, 1, 0, 1 << 16, 1 << 16);
    io::FramePtr dst = io::make_frame();
    dst->format = AV_PIX_FMT_GBRPF32;
    dst->width = 64;
    dst->height = 48;
    ASSERT_GE(av_frame_get_buffer(dst.get(), 0), 0);
    ASSERT_GE(sws_scale_frame(c, dst.get(), frame.get()), 0);
    Planar ref(3, 1, 48, 64);
    const int order[3] = {1, 2, 0};  // GBRP planes → R, G, B
    for (int i = 0; i < 3; ++i) {
      for (int y = 0; y < 48; ++y) {
        std::memcpy(ref.plane(order[i], 0) + y * 64, dst->data[i] + y * dst->linesize[i],
                    64 * sizeof(float));
      }
    }
    const at::Tensor rgb =
        models::YuvConverter(f, 2, at::kCPU).to_rgb(pack(*frame, f, 2), at::kFloat);
    const Diff d = rgb_diff(rgb, ref);
    EXPECT_LE(d.max, 1.0 / 255.0 + 1e-4) << "siting " << sx << "," << sy;
    // The centred conversion of the same picture differs at its chroma edges: siting matters.
    YuvFormat centred = f;
    centred.chroma_x = centred.chroma_y = 0.5;
    const at::Tensor other =
        models::YuvConverter(centred, 2, at::kCPU).to_rgb(pack(*frame, f, 2), at::kFloat);
    EXPECT_GT(rgb_diff(other, ref).max, 4 * d.max) << "siting " << sx << "," << sy;
  }
}

// Ordered dither: deterministic, within one level of rounding, the mean kept on a smooth ramp.
TEST(YuvColour, DitherKeepsTheMeanWithinOneLevel) {
  YuvFormat f = format_of(AV_PIX_FMT_YUV420P, 96, 64, YuvMatrix::kBt709, false);
  const at::Tensor ramp = at::linspace(0.2, 0.21, 96).view({1, 1, 1, 96}).expand({1, 3, 64, 96});
  const models::YuvConverter conv(f, 64, at::kCPU);
  const at::Tensor rounded = conv.from_rgb(ramp.contiguous(), false);
  const at::Tensor dithered = conv.from_rgb(ramp.contiguous(), true);
  const at::Tensor again = conv.from_rgb(ramp.contiguous(), true);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(samples_packed(dithered, f, 64, p), samples_packed(again, f, 64, p)) << p;
  }
  const std::vector<int> a = samples_packed(rounded, f, 64, 0);
  const std::vector<int> b = samples_packed(dithered, f, 64, 0);
  double exact = 0, mean_dither = 0;
  int most = 0;
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    most = std::max(most, std::abs(a[i] - b[i]));
    differs = differs || a[i] != b[i];
    mean_dither += b[i];
  }
  for (int x = 0; x < 96; ++x) exact += 16 + 219 * (0.2 + 0.01 * x / 95.0);
  exact = exact / 96;
  mean_dither /= double(b.size());
  EXPECT_LE(most, 1);
  EXPECT_TRUE(differs);
  EXPECT_NEAR(mean_dither, exact, 0.05);
  // 10-bit output is rounded, not dithered.
  YuvFormat ten = format_of(AV_PIX_FMT_YUV420P10LE, 96, 64, YuvMatrix::kBt709, false);
  const models::YuvConverter conv10(ten, 64, at::kCPU);
  const at::Tensor d10 = conv10.from_rgb(ramp.contiguous(), true);
  const at::Tensor r10 = conv10.from_rgb(ramp.contiguous(), false);
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(samples_packed(d10, ten, 64, p), samples_packed(r10, ten, 64, p)) << p;
  }
}

TEST(YuvColour, RefusesWhatItCannotConvert) {
  YuvFormat f = format_of(AV_PIX_FMT_YUV420P, 64, 48, YuvMatrix::kBt709, false);
  const models::YuvConverter conv(f, 2, at::kCPU);
  EXPECT_THROW(conv.to_rgb(at::zeros({1, 10}, at::kByte), at::kFloat), Error);
  EXPECT_THROW(conv.from_rgb(at::zeros({1, 3, 10, 10}), false), Error);
  YuvFormat bad = f;
  bad.shift_x = 2;  // 4:1:1
  EXPECT_THROW(models::YuvConverter(bad, 2, at::kCPU), Error);
}

}  // namespace
}  // namespace wm
