// The device frame path (scheduler/upscale_device.h, parallel/frame_path.h) through the real
// wmbatch binary on the CPU (`frame_path: device`; on GPUs `auto` takes it): a Real-ESRGAN job
// (the tiny golden SRVGG) writes the frames and timestamps the host path writes, its pictures
// within the stated tolerance of the host path's, its report names the path and what bounds it;
// several encoder instances give the same decoded frames as one (lossless) and the same bytes on
// every run; where the path does not apply the log says why and the host path runs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "io/video_reader.h"
#include "scheduler/upscale_device.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kWeights =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/srvgg-x2-tiny/weights.safetensors";

struct Picture {
  int64_t pts = 0;
  int depth = 8;
  std::vector<std::vector<int>> plane;  // Y, U, V samples, rows packed
};

std::vector<Picture> read_pictures(const std::string& path) {
  io::VideoReader reader(path);
  std::vector<Picture> out;
  io::VideoFrame timing;
  io::YuvImage image;
  while (reader.read_yuv(timing, image)) {
    Picture p;
    p.pts = timing.pts;
    p.depth = image.depth;
    for (int c = 0; c < 3; ++c) {
      std::vector<int> samples;
      for (int y = 0; y < image.plane_height(c); ++y) {
        const uint8_t* row = image.data[c] + image.stride[c] * y;
        for (int x = 0; x < image.plane_width(c); ++x) {
          samples.push_back(image.depth > 8 ? (row[2 * x] | (row[2 * x + 1] << 8)) : row[x]);
        }
      }
      p.plane.push_back(std::move(samples));
    }
    out.push_back(std::move(p));
  }
  return out;
}

struct Difference {
  double psnr = 99;
  int max = 0;
};

Difference compare(const std::vector<int>& a, const std::vector<int>& b, int depth) {
  EXPECT_EQ(a.size(), b.size());
  double se = 0;
  Difference d;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const int e = std::abs(a[i] - b[i]);
    d.max = std::max(d.max, e);
    se += double(e) * e;
  }
  const double peak = double((1 << depth) - 1);
  const double mse = se / double(std::max<size_t>(a.size(), 1));
  d.psnr = mse > 0 ? 10 * std::log10(peak * peak / mse) : 99.0;
  return d;
}

nlohmann::json input_report(const std::string& path) {
  return nlohmann::json::parse(read_text(path)).at(0).at("inputs").at(0);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CommandResult run_job(TempDir& dir, const std::string& name, const std::string& body) {
  write_text(
      dir.file(name + ".yaml"),
      "on_exists: overwrite\nmodel: {kind: realesrgan, weights: '" + kWeights + "'}\n" + body);
  return wmbatch({dir.file(name + ".yaml"), "--report", dir.file(name + ".json")});
}

// The verdict counts the encoders' drain after the last frame (a 100-frame 1080p job on an H200:
// 0.96 s of pipeline, 2.37 s of finishing, and the pipeline's verdict said "the GPU").
TEST(DevicePath, TheVerdictCountsTheEncodersDrain) {
  const std::string gpu = "bound by the GPU (model and conversions) (busy 98% of the time)";
  const std::string drained = sched::bound_after_finish(gpu, 0.96, 2.37);
  EXPECT_EQ(
      drained.rfind("bound by encode (the encoders finished 2.37 s after a 0.96 s pipeline)", 0),
      0u)
      << drained;
  EXPECT_NE(drained.find(gpu), std::string::npos) << "what was busiest before stays said";
  EXPECT_EQ(sched::bound_after_finish(gpu, 10.0, 0.5), gpu) << "a short drain changes nothing";
  EXPECT_EQ(sched::bound_after_finish("", 1.0, 5.0), "") << "a path that says nothing stays silent";
}

TEST(DevicePath, WritesWhatTheHostPathWritesWithinTolerance) {
  TempDir dir("device-path");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 9;  // slices of 4: the last one short
  // ffv1 keeps the pattern's codes exactly and says nothing of chroma siting (H.264 says
  // co-sited, which the device path honours and the host path does not): only the conversions
  // differ between the two paths.
  spec.codec = "ffv1";
  spec.container_ext = ".mkv";
  make_clip(dir.file("in.mkv"), spec);
  const std::string common = "input: in.mkv\nencode: {codec: ffv1}\nslice_frames: 4\n";
  CommandResult r = run_job(dir, "device", common + "output: device.mkv\nframe_path: device\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device frame path"), std::string::npos) << r.output;
  const nlohmann::json report = input_report(dir.file("device.json"));
  EXPECT_EQ(report.value("frame_path_device", 0.0), 1.0);
  EXPECT_NE(report.value("bound", std::string()).find("bound by"), std::string::npos) << report;
  for (const char* key :
       {"stage_decode_seconds", "stage_upload_seconds", "stage_convert_seconds",
        "stage_model_seconds", "stage_convert_back_seconds", "stage_download_seconds",
        "stage_encode_seconds", "gpu_busy_share", "share_encode", "share_model"}) {
    EXPECT_TRUE(report.contains(key)) << key;
  }
  EXPECT_GT(report.value("stage_model_seconds", 0.0), 0.0);

  r = run_job(dir, "host", common + "output: host.mkv\nframe_path: host\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host frame path"), std::string::npos) << r.output;
  EXPECT_FALSE(input_report(dir.file("host.json")).contains("frame_path_device"));

  const auto device = read_pictures(dir.file("device.mkv"));
  const auto host = read_pictures(dir.file("host.mkv"));
  ASSERT_EQ(device.size(), 9u);
  ASSERT_EQ(host.size(), 9u);
  for (size_t i = 0; i < device.size(); ++i) {
    EXPECT_EQ(device[i].pts, host[i].pts) << i;
    for (int c = 0; c < 3; ++c) {
      const Difference d = compare(device[i].plane[c], host[i].plane[c], 8);
      // The conversions differ by rounding and dither, a level or two after the model.
      EXPECT_GE(d.psnr, 45.0) << "frame " << i << " plane " << c;
      EXPECT_LE(d.max, 4) << "frame " << i << " plane " << c;
      if (i == 0) std::printf("[device vs host] plane %d: %.1f dB, max %d\n", c, d.psnr, d.max);
    }
  }
}

// H.264's 4:2:0 chroma is co-sited with the left luma sample: the device path converts it as
// such (the host path, through libswscale without chroma positions, as centred); the pictures
// then differ at the pattern's colour edges, by a quarter of a chroma sample.
TEST(DevicePath, HonoursCoSitedChroma) {
  TempDir dir("device-siting");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  const std::string common = "input: in.mp4\nencode: {codec: ffv1}\n";
  CommandResult r = run_job(dir, "device", common + "output: device.mkv\nframe_path: device\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(chroma at 0,0.5)"), std::string::npos) << r.output;
  r = run_job(dir, "host", common + "output: host.mkv\nframe_path: host\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto device = read_pictures(dir.file("device.mkv"));
  const auto host = read_pictures(dir.file("host.mkv"));
  ASSERT_EQ(device.size(), 2u);
  ASSERT_EQ(host.size(), 2u);
  const Difference d = compare(device[0].plane[1], host[0].plane[1], 8);
  std::printf("[device vs host, co-sited source] chroma: %.1f dB, max %d\n", d.psnr, d.max);
  EXPECT_GE(d.psnr, 28.0);
  EXPECT_LT(d.psnr, 45.0);  // the siting did change the pictures
}

TEST(DevicePath, SegmentInstancesGiveTheSameFramesAndBytes) {
  TempDir dir("device-segments");
  ClipSpec spec;
  spec.width = 32;
  spec.height = 24;
  spec.frames = 60;  // at 10 fps: segments of 24 frames, three of them
  spec.fps = {10, 1};
  make_clip(dir.file("in.mp4"), spec);
  const std::string common =
      "input: in.mp4\nframe_path: device\nslice_frames: 4\n"
      "encode: {codec: libx264, preset: ultrafast, crf: 0, instances: ";
  CommandResult r = run_job(dir, "one", common + "1}\noutput: one.mp4\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_job(dir, "three", common + "3}\noutput: three.mp4\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(input_report(dir.file("three.json")).value("encoder_instances", 0.0), 3.0);
  EXPECT_EQ(input_report(dir.file("three.json")).value("encoder_segments", 0.0), 3.0);
  r = run_job(dir, "again", common + "3}\noutput: again.mp4\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const auto one = read_pictures(dir.file("one.mp4"));
  const auto three = read_pictures(dir.file("three.mp4"));
  ASSERT_EQ(one.size(), 60u);
  ASSERT_EQ(three.size(), 60u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].pts, three[i].pts) << i;
    EXPECT_EQ(one[i].plane, three[i].plane) << "frame " << i;
  }
  EXPECT_EQ(file_bytes(dir.file("three.mp4")), file_bytes(dir.file("again.mp4")));
  const Probe p = probe(dir.file("three.mp4"));
  EXPECT_TRUE(p.has_audio);
  for (const std::string& name : list_dir(dir.path())) {
    EXPECT_EQ(name.find(".wmbatch-segments-"), std::string::npos) << name;
  }
}

TEST(DevicePath, TenBitSourceKeepsItsDepth) {
  TempDir dir("device-10bit");
  ClipSpec spec;
  spec.width = 48;
  spec.height = 32;
  spec.frames = 3;
  spec.pix_fmt = "yuv420p10le";
  spec.audio = false;
  spec.codec = "ffv1";
  spec.container_ext = ".mkv";
  make_clip(dir.file("in.mkv"), spec);
  const std::string common = "input: in.mkv\nencode: {codec: ffv1}\n";
  CommandResult r = run_job(dir, "device", common + "output: device.mkv\nframe_path: device\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(input_report(dir.file("device.json")).value("frame_path_device", 0.0), 1.0);
  r = run_job(dir, "host", common + "output: host.mkv\nframe_path: host\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto device = read_pictures(dir.file("device.mkv"));
  const auto host = read_pictures(dir.file("host.mkv"));
  ASSERT_EQ(device.size(), 3u);
  ASSERT_EQ(host.size(), 3u);
  EXPECT_EQ(device[0].depth, 10);
  for (int c = 0; c < 3; ++c) {
    // 10-bit limited range: libswscale's scale is not BT.709's (test_yuv_colour), up to 3.4
    // codes at white.
    EXPECT_GE(compare(device[0].plane[c], host[0].plane[c], 10).psnr, 45.0) << c;
  }
}

// Where the path does not apply, the host path runs and the log says why.
TEST(DevicePath, FallsBackWithAReason) {
  TempDir dir("device-fallback");
  ClipSpec spec;
  spec.width = 32;
  spec.height = 24;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  CommandResult r = run_job(dir, "tiles",
                            "input: in.mp4\noutput: tiles.mkv\nframe_path: device\n"
                            "encode: {codec: ffv1}\ntiling: {tile: 16, overlap: 4}\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host frame path (RGB float frames on the host): tiles"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(input_report(dir.file("tiles.json")).contains("frame_path_device"));
  // Alpha: a yuva420p source.
  ClipSpec alpha = spec;
  alpha.codec = "ffv1";
  alpha.pix_fmt = "yuva420p";
  alpha.container_ext = ".mkv";
  make_clip(dir.file("alpha.mkv"), alpha);
  r = run_job(dir, "alpha",
              "input: alpha.mkv\noutput: alpha_out.mkv\nframe_path: device\nencode: {codec: "
              "ffv1}\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the source has alpha"), std::string::npos) << r.output;
  // On the CPU, auto keeps the host path.
  r = run_job(dir, "auto", "input: in.mp4\noutput: auto.mkv\nencode: {codec: ffv1}\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the model runs on the CPU"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wm::test
