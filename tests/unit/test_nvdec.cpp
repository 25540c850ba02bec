// NVDEC requests on any host (ReaderOptions::nvdec, the job's `decode:`): where NVDEC cannot be
// used (no CUDA driver or GPU, a codec it does not decode) the reader falls back to software with
// one warning and returns exactly the frames of a software read; on a host with a GPU the same
// tests run on NVDEC and still expect identical frames. Also: NV12/P010 frames (what NVDEC hands
// over) convert to the same RGB as the planar formats of the software decoders, and a job's
// decode mode and devices map to reader options. GPU-only checks: test_nvdec_gpu.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/av_handles.h"
#include "io/av_log.h"
#include "io/pixel_convert.h"
#include "io/video_reader.h"
#include "scheduler/tasks.h"
#include "tests/support/log_capture.h"
#include "tests/support/media.h"

extern "C" {
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>
}

namespace wm {
namespace {

using io::ReaderOptions;
using io::VideoFrame;
using io::VideoReader;
using test::ClipSpec;
using test::LogCapture;
using test::make_clip;
using test::TempDir;

// Whether this host can open CUDA device 0 for libav (the NVDEC tests then expect NVDEC used).
bool cuda_device_opens() {
  io::install_av_log();
  io::AvLogCapture quiet;
  AVBufferRef* device = nullptr;
  if (av_hwdevice_ctx_create(&device, AV_HWDEVICE_TYPE_CUDA, "0", nullptr, 0) < 0) return false;
  av_buffer_unref(&device);
  return true;
}

struct Decoded {
  std::vector<VideoFrame> frames;
  std::string decoder;
};

Decoded read_with(const std::string& path, const ReaderOptions& options) {
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

ReaderOptions nvdec_options() {
  ReaderOptions options;
  options.nvdec = true;
  return options;
}

void expect_same_frames(const std::vector<VideoFrame>& a, const std::vector<VideoFrame>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    EXPECT_EQ(a[i].pts, b[i].pts) << "frame " << i;
    EXPECT_EQ(a[i].duration, b[i].duration) << "frame " << i;
    EXPECT_EQ(a[i].image.data, b[i].image.data) << "frame " << i;  // bit-identical
  }
}

TEST(NvdecRequest, H264GivesTheFramesOfASoftwareRead) {
  TempDir dir("nvdec");
  const std::string path = dir.file("clip.mp4");
  ClipSpec spec;
  spec.frames = 12;
  spec.gop = 5;
  make_clip(path, spec);
  const Decoded software = read_with(path, {});
  EXPECT_EQ(software.decoder, "h264");
  ASSERT_EQ(software.frames.size(), 12u);

  const bool gpu = cuda_device_opens();
  LogCapture log({"dec:h264", "libav"});
  const Decoded requested = read_with(path, nvdec_options());
  expect_same_frames(requested.frames, software.frames);
  EXPECT_EQ(requested.decoder, gpu ? "h264 (nvdec)" : "h264");
  // Without a GPU: one warning that names the file and the reason, and libav's own complaints
  // about the missing driver are not shown.
  const auto warnings = log.lines("warning");
  EXPECT_EQ(log.lines("error").size(), 0u) << log.text();
  ASSERT_EQ(warnings.size(), gpu ? 0u : 1u) << log.text();
  if (!gpu) {
    EXPECT_NE(warnings[0].find(path + ": NVDEC not used, decoding in software: cannot open CUDA "
                                      "device 0"),
              std::string::npos)
        << warnings[0];
  }
}

TEST(NvdecRequest, CodecWithoutNvdecFallsBackWithOneWarning) {
  TempDir dir("nvdec");
  const std::string path = dir.file("clip.mkv");
  ClipSpec spec;
  spec.codec = "ffv1";
  spec.container_ext = ".mkv";
  spec.audio = false;
  spec.frames = 4;
  make_clip(path, spec);
  const Decoded software = read_with(path, {});
  LogCapture log({"dec:ffv1", "libav"});
  const Decoded requested = read_with(path, nvdec_options());
  expect_same_frames(requested.frames, software.frames);
  EXPECT_EQ(requested.decoder, "ffv1");
  const auto warnings = log.lines("warning");
  ASSERT_EQ(warnings.size(), 1u) << log.text();
  EXPECT_NE(warnings[0].find(path + ": NVDEC not used, decoding in software: NVDEC does not "
                                    "decode ffv1"),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(log.lines("error").size(), 0u) << log.text();
}

TEST(NvdecRequest, SoftwareByDefaultWithoutWarnings) {
  TempDir dir("nvdec");
  const std::string path = dir.file("clip.mp4");
  ClipSpec spec;
  spec.frames = 3;
  make_clip(path, spec);
  LogCapture log({"dec:h264", "libav"});
  EXPECT_EQ(read_with(path, {}).decoder, "h264");
  EXPECT_EQ(log.lines("warning").size(), 0u) << log.text();
}

TEST(NvdecRequest, SeekGivesTheFramesOfASoftwareRead) {
  TempDir dir("nvdec");
  const std::string path = dir.file("gop.mp4");
  ClipSpec spec;
  spec.frames = 20;
  spec.gop = 4;
  spec.audio = false;
  make_clip(path, spec);
  const auto all = test::read_all(path);
  ASSERT_EQ(all.size(), 20u);
  VideoReader reader(path, nvdec_options());
  for (int64_t target : {9, 3, 0, 17}) {
    reader.seek_to_frame(target);
    VideoFrame frame;
    ASSERT_TRUE(reader.read(frame)) << target;
    EXPECT_EQ(frame.index, target);
    EXPECT_EQ(frame.pts, all[target].pts);
    EXPECT_EQ(frame.image.data, all[target].image.data) << target;
  }
}

// --- what NVDEC hands over -----------------------------------------------------------------------

// Every frame of `path` as libavcodec's software decoder outputs it (no conversion).
std::vector<io::FramePtr> decode_raw(const std::string& path) {
  AVFormatContext* raw = nullptr;
  io::av_check(avformat_open_input(&raw, path.c_str(), nullptr, nullptr), "open", path);
  io::FormatInputPtr input(raw);
  io::av_check(avformat_find_stream_info(input.get(), nullptr), "stream info", path);
  const int index = av_find_best_stream(input.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  io::av_check(index, "av_find_best_stream", path);
  const AVCodecParameters* par = input->streams[index]->codecpar;
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  io::CodecContextPtr decoder(avcodec_alloc_context3(codec));
  io::av_check(avcodec_parameters_to_context(decoder.get(), par), "parameters", path);
  io::av_check(avcodec_open2(decoder.get(), codec, nullptr), "avcodec_open2", path);
  std::vector<io::FramePtr> frames;
  io::PacketPtr packet = io::make_packet();
  const auto drain = [&] {
    for (;;) {
      io::FramePtr frame = io::make_frame();
      if (avcodec_receive_frame(decoder.get(), frame.get()) < 0) return;
      frames.push_back(std::move(frame));
    }
  };
  while (av_read_frame(input.get(), packet.get()) >= 0) {
    if (packet->stream_index == index)
      io::av_check(avcodec_send_packet(decoder.get(), packet.get()), "send", path);
    av_packet_unref(packet.get());
    drain();
  }
  avcodec_send_packet(decoder.get(), nullptr);
  drain();
  return frames;
}

// The same samples in another layout of the same subsampling (yuv420p → nv12, yuv420p10le →
// p010le, yuv420p12le → p016le: chroma interleaved, the bits at the top of each 16-bit word, as
// NVDEC hands them over).
// `swap_chroma`: Cb and Cr exchanged, a wrong repack for the tests' control.
io::FramePtr repack(const AVFrame& src, AVPixelFormat format, bool swap_chroma = false) {
  io::FramePtr dst = io::make_frame();
  dst->format = format;
  dst->width = src.width;
  dst->height = src.height;
  io::av_check(av_frame_get_buffer(dst.get(), 0), "av_frame_get_buffer", "repack");
  io::av_check(av_frame_copy_props(dst.get(), &src), "av_frame_copy_props", "repack");
  for (AVBufferRef* buf : dst->buf) {
    if (buf) std::memset(buf->data, 0, buf->size);
  }
  const AVPixFmtDescriptor* from = av_pix_fmt_desc_get(AVPixelFormat(src.format));
  const AVPixFmtDescriptor* to = av_pix_fmt_desc_get(format);
  // P010 declares 10 bits (shifted by its descriptor); P016 holds 12-bit samples in 16 bits.
  const int shift = to->comp[0].depth - from->comp[0].depth;
  std::vector<uint16_t> line(src.width);
  for (int c = 0; c < 3; ++c) {
    const int w = c ? AV_CEIL_RSHIFT(src.width, from->log2_chroma_w) : src.width;
    const int h = c ? AV_CEIL_RSHIFT(src.height, from->log2_chroma_h) : src.height;
    for (int y = 0; y < h; ++y) {
      av_read_image_line2(line.data(), const_cast<const uint8_t**>(src.data), src.linesize, from, 0,
                          y, c, w, 0, 2);
      for (int x = 0; x < w; ++x) line[x] = uint16_t(line[x] << shift);
      const int to_c = swap_chroma && c > 0 ? 3 - c : c;
      av_write_image_line2(line.data(), dst->data, dst->linesize, to, 0, y, to_c, w, 2);
    }
  }
  return dst;
}

struct SemiPlanarCase {
  const char* planar;       // what libavcodec's software decoder outputs
  const char* semi_planar;  // what NVDEC hands over for the same stream
  const char* encoder;      // makes the test clip
};

class SemiPlanarFrames : public testing::TestWithParam<SemiPlanarCase> {};

bool encoder_takes(const char* encoder, AVPixelFormat format) {
  const AVCodec* codec = avcodec_find_encoder_by_name(encoder);
  if (!codec || !codec->pix_fmts) return false;
  for (const AVPixelFormat* p = codec->pix_fmts; *p != AV_PIX_FMT_NONE; ++p) {
    if (*p == format) return true;
  }
  return false;
}

// The colour conversion of NVDEC frames is the one of software frames, bit for bit: with H.264
// and HEVC decoding bit-exact on both, NVDEC reads give the pixels of software reads.
TEST_P(SemiPlanarFrames, ConvertToTheSameRgb) {
  const SemiPlanarCase& c = GetParam();
  if (!encoder_takes(c.encoder, av_get_pix_fmt(c.planar))) {
    GTEST_SKIP() << c.encoder << " of this FFmpeg cannot encode " << c.planar;
  }
  TempDir dir("nvdec");
  for (const int height : {48, 720}) {  // BT.601 and BT.709 by the size rule
    const std::string path = dir.file("clip" + std::to_string(height) + ".mkv");
    ClipSpec spec;
    spec.codec = c.encoder;
    spec.container_ext = ".mkv";
    spec.pix_fmt = c.planar;
    spec.width = height == 48 ? 64 : 1280;
    spec.height = height;
    spec.frames = 2;
    spec.audio = false;
    make_clip(path, spec);
    const auto frames = decode_raw(path);
    ASSERT_EQ(frames.size(), 2u);
    for (const auto& frame : frames) {
      ASSERT_EQ(frame->format, av_get_pix_fmt(c.planar));
      const io::FramePtr semi = repack(*frame, av_get_pix_fmt(c.semi_planar));
      Planar from_planar, from_semi;
      io::FrameToPlanar(1).convert(*frame, from_planar);
      io::FrameToPlanar(1).convert(*semi, from_semi);
      EXPECT_EQ(from_semi.data, from_planar.data) << c.semi_planar << " " << height << "p";
      Planar swapped;  // the check can fail: Cb and Cr exchanged
      io::FrameToPlanar(1).convert(*repack(*frame, av_get_pix_fmt(c.semi_planar), true), swapped);
      EXPECT_NE(swapped.data, from_planar.data);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, SemiPlanarFrames,
                         testing::Values(SemiPlanarCase{"yuv420p", "nv12", "libx264"},
                                         SemiPlanarCase{"yuv420p10le", "p010le", "libx264"},
                                         SemiPlanarCase{"yuv420p12le", "p016le", "ffv1"}),
                         [](const auto& info) { return std::string(info.param.semi_planar); });

// --- job → reader options ----------------------------------------------------------------------

TEST(ReaderOptionsForJob, FollowDecodeModeAndDevices) {
  const Device cpu{};
  const Device gpu0{Device::Kind::kCuda, 0};
  const Device gpu1{Device::Kind::kCuda, 1};
  const Device gpu2{Device::Kind::kCuda, 2};
  JobSpec job;
  job.max_error_rate = 0.25;
  EXPECT_EQ(sched::reader_options(job, {cpu}, {}).max_error_rate, 0.25);
  EXPECT_FALSE(sched::reader_options(job, {gpu1}, {}).nvdec);  // software by default

  job.decode = DecodeMode::kNvdec;
  ReaderOptions o = sched::reader_options(job, {cpu}, {});
  EXPECT_TRUE(o.nvdec);  // asked for explicitly: GPU 0 even for a CPU job
  EXPECT_EQ(o.cuda_device, 0);
  o = sched::reader_options(job, {gpu2, gpu0}, {});
  EXPECT_TRUE(o.nvdec);
  EXPECT_EQ(o.cuda_device, 2);  // the job's first GPU

  job.decode = DecodeMode::kAuto;
  EXPECT_FALSE(sched::reader_options(job, {cpu}, {}).nvdec);
  o = sched::reader_options(job, {gpu1, gpu0}, {});
  EXPECT_TRUE(o.nvdec);
  EXPECT_EQ(o.cuda_device, 1);

  job.decode = DecodeMode::kSoftware;
  EXPECT_FALSE(sched::reader_options(job, {gpu0}, {}).nvdec);
}

}  // namespace
}  // namespace wm
