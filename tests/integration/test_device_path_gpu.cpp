// The device frame path on a CUDA device (label gpu; skipped without one), through the real
// wmbatch binary: `frame_path: auto` takes it on a GPU; its output is within the CPU test's
// tolerance of the host path's (tests/integration/test_device_path.cpp); with `decode: nvdec` the
// NV12 frames give the pictures software decoding gives (NVDEC is bit-exact for H.264, and the
// converter turns NV12 into what it turns yuv420p into); fp16 runs; the report's meters are
// filled from the device's events.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/video_reader.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kWeights =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/srvgg-x2-tiny/weights.safetensors";

bool have_gpu() { return static_cast<int>(torch::cuda::device_count()) > 0; }

std::vector<std::vector<uint8_t>> pictures(const std::string& path) {
  io::VideoReader reader(path);
  std::vector<std::vector<uint8_t>> out;
  io::VideoFrame timing;
  io::YuvImage image;
  while (reader.read_yuv(timing, image)) {
    std::vector<uint8_t> bytes;
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < image.plane_height(c); ++y) {
        const uint8_t* row = image.data[c] + image.stride[c] * y;
        bytes.insert(bytes.end(), row, row + image.plane_width(c));
      }
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = double(a[i]) - double(b[i]);
    se += e * e;
  }
  const double mse = se / double(std::max<size_t>(a.size(), 1));
  return mse > 0 ? 10 * std::log10(255.0 * 255.0 / mse) : 99.0;
}

nlohmann::json input_report(const std::string& path) {
  return nlohmann::json::parse(read_text(path)).at(0).at("inputs").at(0);
}

CommandResult run_job(TempDir& dir, const std::string& name, const std::string& body) {
  write_text(dir.file(name + ".yaml"),
             "input: in.mp4\non_exists: overwrite\nencode: {codec: ffv1}\ndevices: [0]\n"
             "model: {kind: realesrgan, weights: '" +
                 kWeights + "'}\noutput: " + name + ".mkv\n" + body);
  return wmbatch({dir.file(name + ".yaml"), "--report", dir.file(name + ".json")});
}

TEST(DevicePathGpu, AutoTakesItAndMatchesTheHostPath) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir("device-path-gpu");
  ClipSpec spec;
  spec.width = 320;
  spec.height = 180;
  spec.frames = 11;
  make_clip(dir.file("in.mp4"), spec);
  CommandResult r = run_job(dir, "device", "precision: fp32\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device frame path"), std::string::npos) << r.output;
  const nlohmann::json report = input_report(dir.file("device.json"));
  EXPECT_EQ(report.value("frame_path_device", 0.0), 1.0);
  EXPECT_GT(report.value("stage_model_seconds", 0.0), 0.0);
  EXPECT_GT(report.value("stage_upload_seconds", 0.0), 0.0);
  EXPECT_GT(report.value("stage_download_seconds", 0.0), 0.0);
  EXPECT_GT(report.value("gpu_busy_share", 0.0), 0.0);
  std::printf("[device path gpu] %s\n", report.value("bound", std::string()).c_str());
  r = run_job(dir, "host", "precision: fp32\nframe_path: host\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto device = pictures(dir.file("device.mkv"));
  const auto host = pictures(dir.file("host.mkv"));
  ASSERT_EQ(device.size(), 11u);
  ASSERT_EQ(host.size(), 11u);
  for (size_t i = 0; i < device.size(); ++i) EXPECT_GE(psnr(device[i], host[i]), 36.0) << i;

  // fp16 and several encoder instances run too.
  r = run_job(dir, "half", "precision: fp16\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto half = pictures(dir.file("half.mkv"));
  ASSERT_EQ(half.size(), 11u);
  for (size_t i = 0; i < half.size(); ++i) EXPECT_GE(psnr(half[i], device[i]), 34.0) << i;
}

TEST(DevicePathGpu, NvdecFramesGiveTheSoftwarePictures) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  TempDir dir("device-path-nvdec");
  ClipSpec spec;
  spec.width = 320;
  spec.height = 240;
  spec.frames = 6;
  make_clip(dir.file("in.mp4"), spec);
  CommandResult r = run_job(dir, "software", "precision: fp32\ndecode: software\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_job(dir, "nvdec", "precision: fp32\ndecode: nvdec\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json report = input_report(dir.file("nvdec.json"));
  EXPECT_EQ(report.value("frame_path_device", 0.0), 1.0);
  if (report.value("decoder", std::string()).find("nvdec") == std::string::npos) {
    GTEST_SKIP() << "NVDEC not used here: " << report.value("decoder", std::string());
  }
  EXPECT_EQ(pictures(dir.file("nvdec.mkv")), pictures(dir.file("software.mkv")));
}

}  // namespace
}  // namespace wm::test
