// `wmbench vae-job` through the real binary at a tiny CPU size: the end-to-end decode_latents
// benchmark must run both paths, report them, and leave a correct video (or no files at all).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

std::string wmbench_path() { return std::string(WM_BINARY_DIR) + "/wmbench"; }

const std::vector<std::string> kTiny = {
    "vae-job", "--dim",    "16",  "--latent-frames", "3",    "--height",  "64", "--width",
    "64",      "--device", "cpu", "--dtype",         "fp32", "--threads", "1"};

CommandResult wmbench(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {wmbench_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

// The benchmark's JSON object: the one output line that starts with '{' (logs share the pipe).
nlohmann::json result_json(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '{') return nlohmann::json::parse(line);
  }
  ADD_FAILURE() << "no JSON object in the output:\n" << output;
  return nlohmann::json::object();
}

class BenchVaeJob : public testing::Test {
 protected:
  void SetUp() override {
    if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  }
};

TEST_F(BenchVaeJob, TinyCpuRunReportsBothPathsAndRemovesItsFolder) {
  TempDir tmp("bench-vae-job");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.path().c_str(), 1);  // the benchmark's work folder goes here
  const CommandResult r = wmbench(kTiny);
  if (old) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = result_json(r.output);
  ASSERT_TRUE(j.is_object() && j.contains("frames")) << r.output;
  EXPECT_EQ(j["bench"], "vae-job");
  EXPECT_EQ(j["frames"], 9);  // 3 latent frames → 1 + 4·2
  EXPECT_EQ(j["slice_frames"], 4);
  EXPECT_GT(j["decode_only_fps"].get<double>(), 0.0);
  EXPECT_GT(j["job_fps"].get<double>(), 0.0);
  EXPECT_GT(j["ratio"].get<double>(), 0.0);
  EXPECT_EQ(j["output"]["frames_probed"], 9);
  EXPECT_EQ(j["output"]["frames_written"], 9);
  EXPECT_EQ(j["output"]["width"], 64);
  EXPECT_EQ(j["output"]["height"], 64);
  EXPECT_GT(j["output"]["bytes"].get<int64_t>(), 0);
  // The job's stage timings come from the job's report metrics.
  EXPECT_GT(j["job"]["stage_seconds"]["model"].get<double>(), 0.0) << j.dump();
  EXPECT_GT(j["job"]["stage_seconds"]["sink"].get<double>(), 0.0) << j.dump();
  EXPECT_FALSE(j.contains("long"));
  EXPECT_TRUE(list_dir(tmp.path()).empty()) << "work folder left behind";
}

TEST_F(BenchVaeJob, KeepLeavesAPlayableVideoAndTheFullCheckpoint) {
  TempDir tmp("bench-vae-job-keep");
  const std::string keep = tmp.file("work");
  std::vector<std::string> args = kTiny;
  args.insert(args.end(),
              {"--keep", keep, "--slice-frames", "2", "--latent-frames-long", "6", "--batch", "2"});
  const CommandResult r = wmbench(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = result_json(r.output);
  EXPECT_EQ(j["slice_frames"], 2);
  EXPECT_EQ(j["long"]["frames"], 21);  // 6 latent frames → 1 + 4·5
  EXPECT_GT(j["long"]["decode_only_fps"].get<double>(), 0.0);
  // The batch: one job over two copies of the latents, both outputs whole.
  EXPECT_EQ(j["batch"]["inputs"], 2);
  EXPECT_EQ(j["batch"]["frames"], 18);
  EXPECT_GT(j["batch"]["ratio"].get<double>(), 0.0);
  for (const char* name : {"batch_0", "batch_1"}) {
    EXPECT_EQ(probe(keep + "/batch/" + name + ".mp4").video_frames, 9) << name;
  }

  const Probe p = probe(keep + "/out.mp4");
  EXPECT_EQ(p.video_frames, 9);
  EXPECT_EQ(p.width, 64);
  EXPECT_EQ(p.height, 64);
  EXPECT_EQ(p.codec, "h264");
  EXPECT_EQ(p.pix_fmt, "yuv420p");
  EXPECT_NE(read_text(keep + "/job.yaml").find("task: decode_latents"), std::string::npos);

  // Weights in the whole official layout (encoder too), latents as decode_latents reads them.
  ModelConfig config;
  edit_options<models::Wan21VaeOptions>(config).dim = 16;
  io::SafetensorsFile weights(keep + "/weights.safetensors");
  EXPECT_EQ(weights.names().size(), models::wan21_vae_layout(config).size());
  io::SafetensorsFile latents(keep + "/latents.safetensors");
  EXPECT_EQ(latents.info("latent").shape, (std::vector<int64_t>{16, 3, 8, 8}));
  EXPECT_EQ(latents.metadata().at("fps"), "16");
}

TEST_F(BenchVaeJob, BadOptionIsAUsageError) {
  const CommandResult r = wmbench({"vae-job", "--height", "60"});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(r.output.find("multiples of 8"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wm::test
