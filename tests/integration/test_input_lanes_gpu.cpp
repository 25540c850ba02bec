// Input lanes sized from the GPU's memory (scheduler/input_lanes.h), label `gpu`: skipped without
// a CUDA device. A batch of clips upscaled on one GPU with `parallel.inputs` left to auto starts
// more inputs at once once the first has written a few slices (as many as memory, the host's
// cores and the cap allow) and writes exactly what one input at a time writes, with the report in
// the inputs' order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "parallel/devices.h"
#include "scheduler/input_lanes.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

nlohmann::json report_job(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at(0);
}

TEST(InputLanesGpu, AutoLanesOnOneGpuEqualOneInputAtATime) {
  if (parallel::cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device";
  TempDir dir("input-lanes-gpu");
  const std::vector<std::string> clips = make_batch_clips(dir, 6, "yuv444p", [](int i) {
    return std::array<int, 3>{64 + 16 * (i % 3), 48, 8 + i};
  });
  auto job = [&](const std::string& out, const std::string& parallel) {
    std::string yaml = "task: upscale\ninput:\n";
    for (const std::string& c : clips) yaml += "  - " + c + "\n";
    return yaml + "output: " + out +
           "/{stem}.mkv\nmodel: {kind: lanczos, scale: 2}\ndevices: [0]\n" + parallel +
           "slice_frames: 4\nencode: {codec: ffv1, pix_fmt: yuv444p}\n";
  };
  write_text(dir.file("one.yaml"), job("one", "parallel: {inputs: 1}\n"));
  write_text(dir.file("auto.yaml"), job("auto", ""));
  CommandResult r = wmbatch({"--report", dir.file("one.json"), dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = wmbatch({"--report", dir.file("auto.json"), dir.file("auto.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  EXPECT_EQ(report_job(dir.file("one.json")).at("input_lanes"), 1);
  // lanczos needs a few MiB: the host's cores and the cap decide the room, and the lanes are as
  // few as keep the rounds (6 inputs with room for 4: 3 lanes of two inputs each).
  const int cores = int(std::thread::hardware_concurrency());
  const int room = std::max(1, std::min(sched::kMaxLanesPerDevice, cores / sched::kCoresPerLane));
  const int expected = sched::balanced_lanes(int64_t(clips.size()), room, 1);
  const nlohmann::json all = report_job(dir.file("auto.json"));
  EXPECT_EQ(all.at("input_lanes"), expected) << cores << " cores";
  // The first input takes its host threads for the lanes the batch plans to reach
  // (planned_lanes), not for the one lane running when it starts.
  const std::string planned = "thread budget per input: " + std::to_string(cores) + " cores, " +
                              std::to_string(expected) + (expected == 1 ? " lane" : " lanes");
  EXPECT_EQ(r.output.find("thread budget per input"), r.output.find(planned)) << r.output;
  const nlohmann::json& inputs = all.at("inputs");
  ASSERT_EQ(inputs.size(), clips.size());
  for (size_t i = 0; i < clips.size(); ++i) {
    EXPECT_EQ(std::filesystem::path(inputs[i].at("input").get<std::string>()).filename(), clips[i]);
    EXPECT_EQ(inputs[i].at("state"), "done");
    const std::string stem = clips[i].substr(0, clips[i].size() - 4);
    const auto a = read_all(dir.file("one/" + stem + ".mkv"));
    const auto b = read_all(dir.file("auto/" + stem + ".mkv"));
    ASSERT_EQ(a.size(), size_t(8 + i)) << clips[i];
    ASSERT_EQ(a.size(), b.size()) << clips[i];
    for (size_t f = 0; f < a.size(); ++f) {
      EXPECT_EQ(a[f].pts, b[f].pts) << clips[i] << " frame " << f;
      EXPECT_TRUE(a[f].image.data == b[f].image.data) << clips[i] << " frame " << f;
    }
  }
}

// The batch widens while its first input still runs: a long first clip (60 slices) and short ones
// after it. Once the first has written kGrowAfterSlices slices the further lanes start, so the
// second input starts before the first ends (until 2026-11-30 it waited for the whole first
// input); the report's started_seconds says when each began.
TEST(InputLanesGpu, LanesWidenWhileTheFirstInputRuns) {
  if (parallel::cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const int cores = int(std::thread::hardware_concurrency());
  if (std::min(sched::kMaxLanesPerDevice, cores / sched::kCoresPerLane) < 2) {
    GTEST_SKIP() << cores << " cores: one lane per GPU, nothing to widen";
  }
  TempDir dir("input-lanes-widen");
  const std::vector<std::string> clips = make_batch_clips(dir, 4, "yuv444p", [](int i) {
    return i == 0 ? std::array<int, 3>{640, 360, 240} : std::array<int, 3>{64, 48, 8};
  });
  std::string yaml = "task: upscale\ninput:\n";
  for (const std::string& c : clips) yaml += "  - " + c + "\n";
  yaml +=
      "output: out/{stem}.mkv\nmodel: {kind: lanczos, scale: 2}\ndevices: [0]\n"
      "slice_frames: 4\nencode: {codec: ffv1, pix_fmt: yuv444p}\n";
  write_text(dir.file("job.yaml"), yaml);
  const CommandResult r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json job = report_job(dir.file("job.json"));
  EXPECT_GE(job.at("input_lanes").get<int>(), 2) << r.output;
  const nlohmann::json& inputs = job.at("inputs");
  ASSERT_EQ(inputs.size(), clips.size());
  const double first_end =
      inputs[0].at("started_seconds").get<double>() + inputs[0].at("seconds").get<double>();
  EXPECT_LT(inputs[1].at("started_seconds").get<double>(), first_end) << r.output;
  EXPECT_EQ(inputs[0].at("frames"), 240);
  for (size_t i = 0; i < clips.size(); ++i) EXPECT_EQ(inputs[i].at("state"), "done");
}

}  // namespace
}  // namespace wm::test
