// `wmbench e2e` through the real binary at a tiny CPU size (frame_path: device on the CPU, as
// tests/integration/test_device_path.cpp runs it): the job, the model alone and the encoder alone
// in one call, the ratio against the slower ceiling, and the job's stage meters from its report.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

std::string wmbench_path() { return std::string(WM_BINARY_DIR) + "/wmbench"; }

// The benchmark's JSON object: from the line that is "{" to the end (logs come before it).
nlohmann::json result_json(const std::string& output) {
  const size_t start = output.rfind("\n{\n");
  const size_t at = output.rfind("{\n", 0) == 0 ? 0 : start;
  if (at == std::string::npos) {
    ADD_FAILURE() << "no JSON object in the output:\n" << output;
    return nlohmann::json::object();
  }
  return nlohmann::json::parse(output.substr(at));
}

TEST(BenchE2e, TinyCpuJobBesideItsCeilings) {
  if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  TempDir tmp("bench-e2e");
  const CommandResult r =
      run_command({wmbench_path(), "e2e",       "--model",      "realesr-animevideov3",
                   "--size",       "64x48",     "--scale",      "2",
                   "--frames",     "8",         "--device",     "cpu",
                   "--precision",  "fp32",      "--frame-path", "device",
                   "--preset",     "ultrafast", "--warmup",     "0",
                   "--calls",      "1",         "--workdir",    tmp.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = result_json(r.output);
  ASSERT_TRUE(j.is_object() && j.contains("job_fps")) << r.output;
  EXPECT_EQ(j["bench"], "e2e");
  EXPECT_EQ(j["output_size"], "128x96");
  EXPECT_EQ(j["job"]["frames"], 8);
  EXPECT_GT(j["job_fps"].get<double>(), 0.0);
  ASSERT_TRUE(j["model_alone"].contains("fps")) << j.dump(1);
  ASSERT_TRUE(j["encoder_alone"].contains("fps")) << j.dump(1);
  EXPECT_GT(j["model_alone"]["fps"].get<double>(), 0.0);
  EXPECT_GT(j["encoder_alone"]["fps"].get<double>(), 0.0);
  const double ceiling =
      std::min(j["model_alone"]["fps"].get<double>(), j["encoder_alone"]["fps"].get<double>());
  EXPECT_DOUBLE_EQ(j["ceiling_fps"].get<double>(), ceiling);
  EXPECT_NEAR(j["ratio"].get<double>(), j["job_fps"].get<double>() / ceiling, 1e-9);
  // The device path's meters, from the job's report.
  const nlohmann::json& m = j["job"]["metrics"];
  EXPECT_EQ(m["frame_path_device"], 1) << m.dump(1);
  for (const char* stage : {"decode", "model", "encode"}) {
    EXPECT_GT(m["stage_" + std::string(stage) + "_seconds"].get<double>(), 0.0) << stage;
  }
  EXPECT_FALSE(j["job"]["bound"].get<std::string>().empty());
  // The job's output is a real video of the scaled size.
  const Probe out = probe(tmp.path() + "/out_clip_64x48_8f.mp4");
  EXPECT_EQ(out.video_frames, 8);
  EXPECT_EQ(out.width, 128);
  EXPECT_EQ(out.height, 96);
}

// A built-in resampler (the CPU path): its YUV-native job set against the encoder alone only, with
// one writer on both sides.
TEST(BenchE2e, ResamplerJobAgainstItsEncoderAlone) {
  if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  TempDir tmp("bench-e2e-lanczos");
  const CommandResult r = run_command({wmbench_path(), "e2e", "--model", "lanczos", "--size",
                                       "64x48", "--frames", "6", "--device", "cpu", "--preset",
                                       "ultrafast", "--warmup", "0", "--workdir", tmp.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = result_json(r.output);
  ASSERT_TRUE(j.is_object() && j.contains("job_fps")) << r.output;
  EXPECT_EQ(j["output_size"], "128x96");  // scale 2 unless --scale says otherwise
  EXPECT_EQ(j["job"]["frames"], 6);
  EXPECT_EQ(j["job"]["metrics"]["yuv_native"], 1) << j.dump(1);
  EXPECT_TRUE(j["model_alone"].contains("skipped")) << j.dump(1);
  ASSERT_TRUE(j["encoder_alone"].contains("fps")) << j.dump(1);
  EXPECT_EQ(j["encoder_alone"]["instances"], 1);
  EXPECT_EQ(j["slower_ceiling"], "encoder");
  EXPECT_NEAR(j["ratio"].get<double>(),
              j["job_fps"].get<double>() / j["encoder_alone"]["fps"].get<double>(), 1e-9);
  const Probe out = probe(tmp.path() + "/out_clip_64x48_6f.mp4");
  EXPECT_EQ(out.video_frames, 6);
  EXPECT_EQ(out.width, 128);
  EXPECT_EQ(out.height, 96);
}

// --repeats: pairs of (job, encoder alone) in turn, the reported figures their medians.
TEST(BenchE2e, RepeatsReportTheMediansOfThePairs) {
  if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  TempDir tmp("bench-e2e-repeats");
  const CommandResult r = run_command(
      {wmbench_path(), "e2e", "--model", "lanczos", "--size", "64x48", "--frames", "4", "--device",
       "cpu", "--preset", "ultrafast", "--warmup", "0", "--repeats", "3", "--workdir", tmp.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = result_json(r.output);
  ASSERT_TRUE(j.contains("pairs") && j["pairs"].is_array()) << r.output;
  ASSERT_EQ(j["pairs"].size(), 3u) << j.dump(1);
  std::vector<double> jobs, encoders, ratios;
  for (const nlohmann::json& p : j["pairs"]) {
    jobs.push_back(p["job_fps"].get<double>());
    encoders.push_back(p["encoder_fps"].get<double>());
    ratios.push_back(p["ratio"].get<double>());
    EXPECT_NEAR(ratios.back(), jobs.back() / encoders.back(), 1e-9);  // no model ceiling here
  }
  auto middle = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[1];
  };
  EXPECT_DOUBLE_EQ(j["job_fps"].get<double>(), middle(jobs));
  EXPECT_DOUBLE_EQ(j["encoder_alone"]["fps"].get<double>(), middle(encoders));
  EXPECT_DOUBLE_EQ(j["ratio"].get<double>(), middle(ratios));
  EXPECT_EQ(j["repeats"], 3);
}

TEST(BenchE2e, UnknownModelNamesTheChoices) {
  if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  const CommandResult r = run_command({wmbench_path(), "e2e", "--model", "nope"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("lanczos"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("realesr-animevideov3"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wm::test
