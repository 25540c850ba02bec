// End-to-end: what the source carries survives an upscale job (the real wmbatch binary), or is
// listed in the report's per-input `dropped` list: odd sizes, alpha around the model, interlaced
// fields and the `deinterlace` key, streams the output container cannot hold.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

// An upscale job (lanczos ×`scale`) of `input` into `output`, plus `extra` YAML lines.
std::string write_job(const TempDir& dir, const std::string& input, const std::string& output,
                      int scale, const std::string& extra = "") {
  const std::string path = dir.file("job.yaml");
  write_text(path, "task: upscale\ninput: " + input + "\noutput: " + output +
                       "\nmodel: {kind: lanczos, scale: " + std::to_string(scale) + "}\n" + extra);
  return path;
}

nlohmann::json first_input(const std::string& report_path) {
  const auto report = nlohmann::json::parse(read_text(report_path));
  return report.at(0).at("inputs").at(0);
}

bool mentions(const nlohmann::json& dropped, const std::string& word) {
  for (const auto& line : dropped) {
    if (line.get<std::string>().find(word) != std::string::npos) return true;
  }
  return false;
}

// A subtitle codec mp4 cannot hold and a font attachment: listed in the report, and the output
// still has the rest. An output that holds everything has an empty list.
TEST(CarryJob, ReportListsWhatTheOutputCannotHold) {
  TempDir dir("carryjob");
  ClipSpec spec;
  spec.container_ext = ".mkv";
  spec.subtitles = true;  // subrip
  spec.font_attachment = true;
  spec.chapters = 2;
  spec.frames = 4;
  make_clip(dir.file("in.mkv"), spec);
  CommandResult r =
      wmbatch({write_job(dir, "in.mkv", "out.mp4", 2, "encode: {preset: ultrafast}\n"), "--report",
               dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto in = first_input(dir.file("report.json"));
  ASSERT_TRUE(in.contains("dropped")) << in.dump();
  EXPECT_TRUE(mentions(in["dropped"], "subrip")) << in.dump();
  EXPECT_TRUE(mentions(in["dropped"], "font.ttf")) << in.dump();
  EXPECT_NE(r.output.find("container mp4 cannot hold"), std::string::npos) << r.output;
  const Probe out = probe(dir.file("out.mp4"));
  EXPECT_TRUE(out.has_audio);
  EXPECT_EQ(out.chapters, 2);

  CommandResult again =
      wmbatch({write_job(dir, "in.mkv", "out.mkv", 2, "encode: {preset: ultrafast}\n"), "--report",
               dir.file("report2.json")});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto kept = first_input(dir.file("report2.json"));
  ASSERT_TRUE(kept.contains("dropped")) << kept.dump();
  EXPECT_TRUE(kept["dropped"].empty()) << kept.dump();
  const Probe mkv = probe(dir.file("out.mkv"));
  EXPECT_EQ(mkv.subtitle_streams, 1);
  EXPECT_EQ(mkv.attachments.size(), 1u);
  EXPECT_EQ(mkv.chapters, 2);
}

// An odd output size stays odd where the encoder takes it (FFV1), and is cropped where it does
// not (x264 4:2:0), which the report lists.
TEST(CarryJob, OddOutputSizeKeptUnlessTheEncoderNeedsEven) {
  TempDir dir("carryjob");
  ClipSpec spec;
  spec.width = 33;
  spec.height = 25;
  spec.frames = 2;
  spec.audio = false;
  spec.codec = "ffv1";
  spec.container_ext = ".mkv";
  make_clip(dir.file("odd.mkv"), spec);
  CommandResult r =
      wmbatch({write_job(dir, "odd.mkv", "odd_x3.mkv", 3, "encode: {codec: ffv1}\n")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe ffv1 = probe(dir.file("odd_x3.mkv"));
  EXPECT_EQ(ffv1.width, 99);
  EXPECT_EQ(ffv1.height, 75);
  EXPECT_EQ(ffv1.video_frames, 2);

  r = wmbatch({write_job(dir, "odd.mkv", "odd_x3.mp4", 3, "encode: {preset: ultrafast}\n"),
               "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe x264 = probe(dir.file("odd_x3.mp4"));
  EXPECT_EQ(x264.width, 98);
  EXPECT_EQ(x264.height, 74);
  EXPECT_NE(r.output.find("cropped to 98x74"), std::string::npos) << r.output;
  EXPECT_TRUE(mentions(first_input(dir.file("report.json"))["dropped"], "column and row"));
}

// Alpha goes around the model (which sees RGB) and is resized to the output: the ramp from
// transparent to opaque is still there, at the output's width.
TEST(CarryJob, AlphaSurvivesAnUpscale) {
  TempDir dir("carryjob");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 16;
  spec.frames = 3;
  spec.audio = false;
  spec.codec = "ffv1";
  spec.pix_fmt = "yuva444p";
  spec.container_ext = ".mkv";
  make_clip(dir.file("a.mkv"), spec);
  CommandResult r =
      wmbatch({write_job(dir, "a.mkv", "a_x2.mkv", 2, "encode: {codec: ffv1}\nslice_frames: 2\n")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("a_x2.mkv")).pix_fmt, "yuva444p");
  const auto frames = read_all(dir.file("a_x2.mkv"));
  ASSERT_EQ(frames.size(), 3u);
  for (const auto& frame : frames) {
    ASSERT_EQ(frame.alpha.width, 128);
    ASSERT_EQ(frame.alpha.height, 32);
    const float* row = frame.alpha.plane(0, 0) + 16 * 128;
    EXPECT_NEAR(row[0], 0.0, 0.02);
    EXPECT_NEAR(row[127], 1.0, 0.02);
    EXPECT_NEAR(row[64], 0.5, 0.03);
  }
}

// `deinterlace:` auto deinterlaces a flagged source (and says so), off keeps and flags the fields.
TEST(CarryJob, DeinterlaceKey) {
  TempDir dir("carryjob");
  ClipSpec spec;
  spec.interlaced = true;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 4;
  spec.audio = false;
  make_clip(dir.file("i.mp4"), spec);
  CommandResult r =
      wmbatch({write_job(dir, "i.mp4", "auto.mkv", 2, "encode: {preset: ultrafast}\n")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("deinterlacing with bwdif"), std::string::npos) << r.output;
  const Probe progressive = probe(dir.file("auto.mkv"));
  EXPECT_EQ(progressive.field_order, 1);  // AV_FIELD_PROGRESSIVE
  EXPECT_EQ(progressive.video_frames, 4);

  r = wmbatch(
      {write_job(dir, "i.mp4", "off.mkv", 2, "encode: {preset: ultrafast}\ndeinterlace: off\n")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("deinterlacing"), std::string::npos) << r.output;
  const Probe fields = probe(dir.file("off.mkv"));
  EXPECT_EQ(fields.field_order, 2);  // AV_FIELD_TT
  EXPECT_TRUE(fields.frame_interlaced);
}

}  // namespace
}  // namespace wm::test
