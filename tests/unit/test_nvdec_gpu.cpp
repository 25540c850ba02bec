// NVDEC on a GPU host (label gpu): H.264 8-bit and HEVC 10/12-bit 4:2:0 decode on NVDEC and
// give the frames of a software read, also after seeks and at sizes with cropping; streams that
// NVDEC does not take (H.264 4:4:4, H.264 10-bit) fall back to software at the first frame. Every
// test skips when libav cannot open CUDA device 0 (no driver or no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/nvdec_context.h"
#include "io/video_reader.h"
#include "tests/support/log_capture.h"
#include "tests/support/media.h"

extern "C" {
#include <libavutil/hwcontext.h>
}

namespace wm {
namespace {

using io::ReaderOptions;
using io::VideoFrame;
using io::VideoReader;
using test::ClipSpec;
using test::make_clip;
using test::TempDir;

bool cuda_device_opens() {
  io::install_av_log();
  io::AvLogCapture quiet;
  AVBufferRef* device = nullptr;
  if (av_hwdevice_ctx_create(&device, AV_HWDEVICE_TYPE_CUDA, "0", nullptr, 0) < 0) return false;
  av_buffer_unref(&device);
  return true;
}

#define WM_REQUIRE_NVDEC()                                                                \
  do {                                                                                    \
    if (!cuda_device_opens()) GTEST_SKIP() << "libav cannot open CUDA device 0 (no GPU)"; \
  } while (0)

struct Decoded {
  std::vector<VideoFrame> frames;
  std::string decoder;
};

Decoded read_with(const std::string& path, bool nvdec) {
  ReaderOptions options;
  options.nvdec = nvdec;
  VideoReader reader(path, options);
  Decoded out;
  for (;;) {
    VideoFrame frame;
    if (!reader.read(frame)) break;
    out.frames.push_back(std::move(frame));
  }
  out.decoder = reader.decoder_name();
  return out;
}

// Largest difference between the RGB frames of two reads, in code values of `bit_depth`;
// also checks that indices and timestamps agree.
double max_code_difference(const std::vector<VideoFrame>& a, const std::vector<VideoFrame>& b,
                           int bit_depth) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].pts, b[i].pts) << "frame " << i;
    EXPECT_EQ(a[i].image.data.size(), b[i].image.data.size());
    for (size_t k = 0; k < std::min(a[i].image.data.size(), b[i].image.data.size()); ++k) {
      worst = std::max(worst, double(std::fabs(a[i].image.data[k] - b[i].image.data[k])));
    }
  }
  return worst * double((1 << bit_depth) - 1);
}

// NVDEC and libavcodec decode H.264/HEVC bit-exactly and NV12/P010/P016 convert like yuv420p/
// yuv420p10le/yuv420p12le (test_nvdec.cpp), so the frames are expected to be identical (measured
// on an H200: 0 code values of difference).
void expect_nvdec_matches_software(const std::string& path, const std::string& decoder,
                                   int bit_depth) {
  const Decoded software = read_with(path, false);
  test::LogCapture log({"dec:" + decoder, "libav"});
  const Decoded hardware = read_with(path, true);
  EXPECT_EQ(log.lines("warning").size(), 0u) << log.text();
  EXPECT_EQ(hardware.decoder, decoder + " (nvdec)");
  EXPECT_EQ(software.decoder, decoder);
  ASSERT_FALSE(software.frames.empty());
  const double worst = max_code_difference(hardware.frames, software.frames, bit_depth);
  std::printf("%s: %zu frames, max difference NVDEC vs software %.3g code values (%d-bit)\n",
              path.c_str(), hardware.frames.size(), worst, bit_depth);
  EXPECT_EQ(worst, 0.0);
  for (size_t i = 0; i < std::min(hardware.frames.size(), software.frames.size()); ++i) {
    EXPECT_EQ(hardware.frames[i].image.data, software.frames[i].image.data) << "frame " << i;
  }
}

// NVDEC's device is the GPU's primary context (the one LibTorch runs in), the same for every
// reader, with a stream of its own per device; devices come and go without using it up (each
// holds a retain of the context and releases it when its last reference goes).
TEST(NvdecGpu, DevicesShareThePrimaryContextWithStreamsOfTheirOwn) {
  WM_REQUIRE_NVDEC();
  std::string why;
  AVBufferRef* a = io::nvdec_primary_device(0, why);
  ASSERT_NE(a, nullptr) << why;
  AVBufferRef* b = io::nvdec_primary_device(0, why);
  ASSERT_NE(b, nullptr) << why;
  const auto [context_a, stream_a] = io::nvdec_handles(a);
  const auto [context_b, stream_b] = io::nvdec_handles(b);
  EXPECT_NE(context_a, nullptr);
  EXPECT_EQ(context_a, context_b);
  EXPECT_NE(stream_a, nullptr);
  EXPECT_NE(stream_a, stream_b);
  const void* primary = context_a;
  av_buffer_unref(&a);
  av_buffer_unref(&b);
  for (int i = 0; i < 50; ++i) {
    AVBufferRef* again = io::nvdec_primary_device(0, why);
    ASSERT_NE(again, nullptr) << why;
    EXPECT_EQ(io::nvdec_handles(again).first, primary);
    av_buffer_unref(&again);
  }
  // Frames decoded on it are the software decoder's (and the reader's report says NVDEC).
  TempDir dir("nvdec-primary");
  ClipSpec spec;
  spec.width = 320;
  spec.height = 180;
  spec.frames = 8;
  spec.audio = false;
  make_clip(dir.file("clip.mp4"), spec);
  expect_nvdec_matches_software(dir.file("clip.mp4"), "h264", 8);
  // An ordinal past the last GPU: no device, and why.
  EXPECT_EQ(io::nvdec_primary_device(4096, why), nullptr);
  EXPECT_NE(why.find("CUDA error"), std::string::npos) << why;
}

TEST(NvdecGpu, H264EightBitMatchesSoftware) {
  WM_REQUIRE_NVDEC();
  TempDir dir("nvdec-gpu");
  // 320x180 and 1920x1080 are coded as 320x192 and 1920x1088: NVDEC's frames are cropped too.
  for (const auto& [width, height, frames] : {std::array<int, 3>{320, 180, 16}, {1920, 1080, 4}}) {
    ClipSpec spec;
    spec.width = width;
    spec.height = height;
    spec.frames = frames;
    spec.gop = 6;
    spec.audio = false;
    const std::string path =
        dir.file("h264_" + std::to_string(width) + "x" + std::to_string(height) + ".mp4");
    make_clip(path, spec);
    expect_nvdec_matches_software(path, "h264", 8);
  }
}

// HEVC clips made with tests/support/media's make_clip and libx265 (320x240, 6 frames with
// B-frames, yuv420p10le / yuv420p12le): the GPU hosts' FFmpeg has no HEVC encoder, and Hopper
// GPUs have no NVENC. NVDEC's HEVC minimum size is 144x144.
std::string hevc_clip(const char* name) {
  return std::string(WM_SOURCE_DIR) + "/tests/data/" + name;
}

TEST(NvdecGpu, Hevc10BitMatchesSoftware) {
  WM_REQUIRE_NVDEC();
  const std::string path = hevc_clip("hevc_main10_320x240.mkv");
  EXPECT_EQ(VideoReader(path).info().bit_depth, 10);
  expect_nvdec_matches_software(path, "hevc", 10);  // P010 from NVDEC
}

TEST(NvdecGpu, Hevc12BitMatchesSoftware) {
  WM_REQUIRE_NVDEC();
  const std::string path = hevc_clip("hevc_main12_320x240.mkv");
  EXPECT_EQ(VideoReader(path).info().bit_depth, 12);
  expect_nvdec_matches_software(path, "hevc", 12);  // P016 from NVDEC
}

TEST(NvdecGpu, SeekOnNvdecMatchesSoftware) {
  WM_REQUIRE_NVDEC();
  TempDir dir("nvdec-gpu");
  const std::string path = dir.file("gop.mp4");
  ClipSpec spec;
  spec.width = 320;
  spec.height = 180;
  spec.frames = 20;
  spec.gop = 4;
  spec.audio = false;
  make_clip(path, spec);
  const Decoded software = read_with(path, false);
  ASSERT_EQ(software.frames.size(), 20u);
  ReaderOptions options;
  options.nvdec = true;
  VideoReader reader(path, options);
  for (int64_t target : {9, 3, 0, 17}) {
    reader.seek_to_frame(target);
    VideoFrame frame;
    ASSERT_TRUE(reader.read(frame)) << target;
    EXPECT_EQ(frame.index, target);
    EXPECT_EQ(frame.pts, software.frames[target].pts);
    EXPECT_EQ(frame.image.data, software.frames[target].image.data) << target;
  }
  EXPECT_EQ(reader.decoder_name(), "h264 (nvdec)");
}

// NVDEC has no H.264 4:4:4 or 10-bit: libavcodec offers CUDA for the first and fails its setup,
// offers no CUDA for the second; both end in a software read from the first frame.
TEST(NvdecGpu, StreamsNvdecDoesNotTakeFallBackToSoftware) {
  WM_REQUIRE_NVDEC();
  TempDir dir("nvdec-gpu");
  for (const char* pix_fmt : {"yuv444p", "yuv420p10le"}) {
    const std::string path = dir.file(std::string("h264_") + pix_fmt + ".mp4");
    ClipSpec spec;
    spec.width = 320;
    spec.height = 180;
    spec.frames = 6;
    spec.audio = false;
    spec.pix_fmt = pix_fmt;
    make_clip(path, spec);
    const Decoded software = read_with(path, false);
    test::LogCapture log({"dec:h264", "libav"});
    const Decoded requested = read_with(path, true);
    EXPECT_EQ(requested.decoder, "h264") << pix_fmt;
    // One warning, naming the file; libav's lines about the failed setup stay at debug level.
    const auto warnings = log.lines("warning");
    ASSERT_EQ(warnings.size(), 1u) << log.text();
    EXPECT_NE(warnings[0].find(path + ": NVDEC failed ("), std::string::npos) << warnings[0];
    EXPECT_EQ(log.lines("error").size(), 0u) << log.text();
    std::printf("%s\n", warnings[0].c_str());
    ASSERT_EQ(requested.frames.size(), software.frames.size()) << pix_fmt;
    for (size_t i = 0; i < software.frames.size(); ++i) {
      EXPECT_EQ(requested.frames[i].pts, software.frames[i].pts);
      EXPECT_EQ(requested.frames[i].image.data, software.frames[i].image.data)
          << pix_fmt << " frame " << i;
    }
  }
}

}  // namespace
}  // namespace wm
