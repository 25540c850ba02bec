// Several GPUs through the real job path (wmbatch on YAML jobs), label `multigpu`: skipped when
// fewer than 2 GPUs are visible.
//  - A batch of clips on input lanes, one per GPU (lanczos on the GPUs), equals the batch on one
//    GPU bit for bit, report in the inputs' order, every GPU busy.
//  - A sequence-parallel rank that fails mid-decode (the test-only fault injection: out of
//    memory, or a rank that stops answering until the timeout aborts the exchange; NCCL when the
//    build has it) fails its input with one line naming the rank and its GPU, exit 1, no output;
//    the next input of the batch runs and equals the one-GPU output within the golden tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "parallel/devices.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/";

nlohmann::json report_inputs(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at(0).at("inputs");
}

std::string gpu_list(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(i);
  return s + "]";
}

TEST(ParallelJobsMultiGpu, BatchOnOneLanePerGpuEqualsOneGpu) {
  const int gpus = parallel::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  TempDir dir("multigpu-lanes");
  const std::vector<std::string> clips = make_batch_clips(dir, 2 * gpus, "yuv444p", [](int i) {
    return std::array<int, 3>{64 + 16 * (i % 3), 48, 8 + i};
  });
  auto job = [&](const std::string& out, const std::string& devices) {
    std::string yaml = "task: upscale\ninput:\n";
    for (const std::string& c : clips) yaml += "  - " + c + "\n";
    return yaml + "output: " + out +
           "/{stem}.mkv\nmodel: {kind: lanczos, scale: 2}\ndevices: " + devices +
           "\nparallel: {mode: data}\nslice_frames: 4\n" +
           "encode: {codec: ffv1, pix_fmt: yuv444p}\n";
  };
  write_text(dir.file("one.yaml"), job("one", "[0]"));
  write_text(dir.file("all.yaml"), job("all", gpu_list(gpus)));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = wmbatch({"--report", dir.file("all.json"), dir.file("all.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json inputs = report_inputs(dir.file("all.json"));
  ASSERT_EQ(inputs.size(), clips.size());
  std::set<std::string> busy;
  for (size_t i = 0; i < clips.size(); ++i) {
    EXPECT_EQ(std::filesystem::path(inputs[i].at("input").get<std::string>()).filename(), clips[i]);
    for (const auto& [key, value] : inputs[i].items()) {
      if (key.rfind("device_cuda", 0) == 0 && key.find("busy") != std::string::npos) {
        busy.insert(key);
      }
    }
    const std::string stem = clips[i].substr(0, clips[i].size() - 4);
    const auto a = read_all(dir.file("one/" + stem + ".mkv"));
    const auto b = read_all(dir.file("all/" + stem + ".mkv"));
    ASSERT_EQ(a.size(), b.size()) << clips[i];
    for (size_t f = 0; f < a.size(); ++f) {
      EXPECT_EQ(a[f].pts, b[f].pts) << clips[i] << " frame " << f;
      EXPECT_TRUE(a[f].image.data == b[f].image.data) << clips[i] << " frame " << f;
    }
  }
  for (int g = 0; g < gpus; ++g) {
    EXPECT_TRUE(busy.count("device_cuda" + std::to_string(g) + "_busy_seconds")) << g;
  }
}

// Two latent files decoded sequence-parallel over `gpus` GPUs with `fault`: the first fails.
void check_gpu_fault(int gpus, const std::string& fault, const std::vector<std::string>& expected,
                     const std::string& extra = "") {
  TempDir dir("multigpu-fault");
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("a.safetensors"));
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("b.safetensors"));
  auto job = [&](const std::string& out, const std::string& devices, const std::string& parallel) {
    return "task: decode_latents\ninput: [a.safetensors, b.safetensors]\ninput_tensor: input\n"
           "output: " +
           out + "/{stem}.safetensors\nslice_frames: 5\ndevices: " + devices + "\n" + parallel +
           "model: {kind: wan2.1-vae, weights: '" + kGolden +
           "weights.safetensors', dim: 16}\nprecision: fp32\n";
  };
  write_text(dir.file("one.yaml"), job("one", "[0]", ""));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_text(dir.file("job.yaml"),
             job("out", gpu_list(gpus),
                 "parallel: {mode: sequence, fault: '" + fault + "'" + extra + "}\n"));
  r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json inputs = report_inputs(dir.file("job.json"));
  ASSERT_EQ(inputs.size(), 2u) << r.output;
  const std::string error = inputs[0].value("error", "");
  std::cout << "[ fault    ] " << gpus << " GPUs, " << fault << ": " << error << "\n";
  EXPECT_EQ(inputs[0].at("state"), "failed");
  EXPECT_NE(error.find("a.safetensors"), std::string::npos) << error;
  for (const std::string& part : expected) EXPECT_NE(error.find(part), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_FALSE(exists(dir.file("out/a.safetensors")));
  EXPECT_EQ(inputs[1].at("state"), "done") << inputs[1].dump();
  const double err = max_abs_diff(read_floats(dir.file("out/b.safetensors"), "output"),
                                  read_floats(dir.file("one/b.safetensors"), "output"));
  std::cout << "[ fault    ] next input against one GPU: max diff " << err << "\n";
  EXPECT_LE(err, 1e-4);
}

TEST(ParallelJobsMultiGpu, FailingRankFailsItsInputAndTheNextRuns) {
  const int gpus = parallel::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  check_gpu_fault(2, "rank1:slice1:oom", {"rank 1 (cuda:1), slice 1: ", "out of device memory"});
  if (gpus >= 4) check_gpu_fault(4, "rank3:slice0:oom", {"rank 3 (cuda:3), slice 0: "});
}

TEST(ParallelJobsMultiGpu, HungRankIsAbortedAtTheTimeout) {
  const int gpus = parallel::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  // The peers' receives wait on the device (NCCL) or in the exchange (in-process) until the
  // timeout aborts the exchange.
  check_gpu_fault(std::min(gpus, 4), "rank1:slice1:hang", {" 5 s"}, ", timeout: 5");
}

}  // namespace
}  // namespace wm::test
