// The built-in resamplers' YUV-native path (scheduler/upscale_yuv.h) through the real wmbatch
// binary: it is taken when the encoder keeps the source's planar YUV format, and its output is
// close to the RGB float path's and to libswscale's lanczos (what `ffmpeg -vf scale=...:flags=
// lanczos` computes) on the same decoded source.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/video_reader.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

extern "C" {
#include <libswscale/swscale.h>
}

namespace wm::test {
namespace {

// One decoded picture's planes, copied out (8-bit).
struct Planes {
  int width = 0, height = 0;
  std::vector<std::vector<uint8_t>> plane;  // Y, U, V, rows packed
  int64_t pts = 0;
};

std::vector<Planes> read_planes(const std::string& path) {
  io::VideoReader reader(path);
  std::vector<Planes> out;
  io::VideoFrame timing;
  io::YuvImage image;
  while (reader.read_yuv(timing, image)) {
    EXPECT_EQ(image.depth, 8);
    Planes p;
    p.width = image.width;
    p.height = image.height;
    p.pts = timing.pts;
    for (int c = 0; c < 3; ++c) {
      const int w = image.plane_width(c), h = image.plane_height(c);
      std::vector<uint8_t> packed(size_t(w) * h);
      for (int y = 0; y < h; ++y) {
        std::copy_n(image.data[c] + image.stride[c] * y, w, packed.data() + size_t(y) * w);
      }
      p.plane.push_back(std::move(packed));
    }
    out.push_back(std::move(p));
  }
  return out;
}

// libswscale's lanczos, yuv420p to yuv420p at `scale`, as the ffmpeg CLI's scale filter runs it.
Planes swscale_lanczos(const Planes& in, int scale) {
  Planes out;
  out.width = in.width * scale;
  out.height = in.height * scale;
  SwsContext* sws = sws_getContext(in.width, in.height, AV_PIX_FMT_YUV420P, out.width, out.height,
                                   AV_PIX_FMT_YUV420P, SWS_LANCZOS, nullptr, nullptr, nullptr);
  EXPECT_NE(sws, nullptr);
  const uint8_t* src[4] = {in.plane[0].data(), in.plane[1].data(), in.plane[2].data(), nullptr};
  const int src_stride[4] = {in.width, in.width / 2, in.width / 2, 0};
  for (int c = 0; c < 3; ++c) {
    out.plane.emplace_back(size_t(c ? out.width / 2 : out.width) *
                           (c ? out.height / 2 : out.height));
  }
  uint8_t* dst[4] = {out.plane[0].data(), out.plane[1].data(), out.plane[2].data(), nullptr};
  const int dst_stride[4] = {out.width, out.width / 2, out.width / 2, 0};
  sws_scale(sws, src, src_stride, 0, in.height, dst, dst_stride);
  sws_freeContext(sws);
  return out;
}

struct Difference {
  double psnr = 0;  // dB over the plane
  int max = 0;      // largest absolute difference in levels
  double mean = 0;  // mean absolute difference in levels
};

Difference compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double se = 0, sum = 0;
  int max = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int d = std::abs(int(a[i]) - int(b[i]));
    se += double(d) * d;
    sum += d;
    max = std::max(max, d);
  }
  const double mse = se / double(a.size());
  return {mse > 0 ? 10 * std::log10(255.0 * 255.0 / mse) : 99.0, max, sum / double(a.size())};
}

// A job's report entry of its one input.
nlohmann::json input_report(const std::string& path) {
  return nlohmann::json::parse(read_text(path)).at(0).at("inputs").at(0);
}

// Two clips: the test pattern, whose component codes include colours outside RGB (the RGB path
// clamps them), and its neutral-chroma (grey) version, which the RGB path carries unclamped.
TEST(UpscaleYuv, NativePathIsCloseToSwscaleAndToTheRgbPath) {
  for (const bool grey : {false, true}) {
    SCOPED_TRACE(grey ? "grey clip" : "colour clip");
    TempDir dir("yuv");
    ClipSpec spec;
    spec.width = 96;
    spec.height = 64;
    spec.frames = 6;
    spec.audio = false;
    spec.grey = grey;
    make_clip(dir.file("in.mp4"), spec);
    const std::string common =
        "input: in.mp4\nmodel: {kind: lanczos, scale: 2}\nencode: {codec: ffv1}\n";
    write_text(dir.file("native.yaml"), common + "output: native.mkv\n");
    // Tiling (exact for the resamplers) keeps the job on the RGB float pipeline.
    write_text(dir.file("rgb.yaml"), common + "output: rgb.mkv\ntiling: {tile: 48, overlap: 6}\n");
    CommandResult r = wmbatch({dir.file("native.yaml"), "--report", dir.file("native.json")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = wmbatch({dir.file("rgb.yaml"), "--report", dir.file("rgb.json")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(input_report(dir.file("native.json")).value("yuv_native", 0.0), 1.0);
    EXPECT_FALSE(input_report(dir.file("rgb.json")).contains("yuv_native"));

    const auto source = read_planes(dir.file("in.mp4"));
    const auto native = read_planes(dir.file("native.mkv"));
    const auto rgb = read_planes(dir.file("rgb.mkv"));
    ASSERT_EQ(source.size(), 6u);
    ASSERT_EQ(native.size(), source.size());
    ASSERT_EQ(rgb.size(), source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "frame " << i);
      ASSERT_EQ(native[i].width, 192);
      ASSERT_EQ(native[i].height, 128);
      EXPECT_EQ(native[i].pts, rgb[i].pts);
      const Planes swscale = swscale_lanczos(source[i], 2);
      for (int c = 0; c < 3; ++c) {
        SCOPED_TRACE(testing::Message() << "plane " << c);
        const Difference vs_rgb = compare(native[i].plane[c], rgb[i].plane[c]);
        const Difference vs_swscale = compare(native[i].plane[c], swscale.plane[c]);
        const Difference rgb_vs_swscale = compare(rgb[i].plane[c], swscale.plane[c]);
        // libswscale: the same filter in 14-bit fixed point: a level at most.
        EXPECT_GE(vs_swscale.psnr, 50.0) << vs_swscale.max << " " << vs_swscale.mean;
        EXPECT_LE(vs_swscale.max, 2);
        EXPECT_GE(vs_swscale.psnr, rgb_vs_swscale.psnr);
        if (grey) {
          // In RGB gamut the RGB path computes the same luma filter (plus two roundings); its
          // chroma is neutral either way.
          EXPECT_GE(vs_rgb.psnr, 60.0) << vs_rgb.max << " " << vs_rgb.mean;
          EXPECT_LE(vs_rgb.max, 1);
        }
        if (i == 0) {
          std::printf(
              "%s plane %d: native vs rgb %.1f dB (max %d, mean %.3f); native vs "
              "swscale %.1f dB (max %d, mean %.3f); rgb vs swscale %.1f dB\n",
              grey ? "grey" : "colour", c, vs_rgb.psnr, vs_rgb.max, vs_rgb.mean, vs_swscale.psnr,
              vs_swscale.max, vs_swscale.mean, rgb_vs_swscale.psnr);
        }
      }
    }
  }
}

// Outputs the encoder takes in another format, or that need the RGB pipeline's conversions,
// stay on it: an explicit pix_fmt, and an output whose guessed colour matrix differs from the
// source's (480 rows: BT.601; 960 rows: BT.709).
TEST(UpscaleYuv, OtherFormatsAndMatricesTakeTheRgbPath) {
  TempDir dir("yuvrgb");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 480;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("a.yaml"),
             "input: in.mp4\noutput: a.mkv\nmodel: {kind: lanczos, scale: 2}\n"
             "encode: {codec: ffv1}\n");
  write_text(dir.file("b.yaml"),
             "input: in.mp4\noutput: b.mkv\nmodel: {kind: bicubic, scale: 2}\n"
             "encode: {codec: ffv1, pix_fmt: yuv444p}\n");
  for (const char* name : {"a", "b"}) {
    const std::string job = dir.file(std::string(name) + ".yaml");
    const std::string report = dir.file(std::string(name) + ".json");
    CommandResult r = wmbatch({job, "--report", report});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(input_report(report).contains("yuv_native")) << name;
    EXPECT_EQ(probe(dir.file(std::string(name) + ".mkv")).video_frames, 2) << name;
  }
}

}  // namespace
}  // namespace wm::test
