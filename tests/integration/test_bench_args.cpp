// wmbench's command lines through the real binary (tools/bench_args.h): --help anywhere prints
// the benchmark's usage and exits 0, an unknown flag or a flag without its value is one line and
// exit 64 (a value flag never takes a following --flag), and `upscale --devices` honours --scale
// for a Real-ESRGAN network as a job's model.scale does.
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

CommandResult wmbench(std::vector<std::string> args) {
  args.insert(args.begin(), wmbench_path());
  return run_command(args);
}

class BenchArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(wmbench_path())) GTEST_FAIL() << wmbench_path() << " is not built";
  }
};

size_t lines(const std::string& text) { return size_t(std::count(text.begin(), text.end(), '\n')); }

TEST_F(BenchArgs, HelpPrintsTheBenchmarksUsage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"upscale", "--help"}, "--skip-ffmpeg"},
      {{"upscale", "--model", "RealESRGAN_x4plus", "--help"}, "--baseline-modes"},
      {{"e2e", "-h"}, "--frame-path auto|device|host"},
      {{"segments", "--help"}, "--segment-frames"},
      {{"vae-decode", "--help"}, "--parallel"},
      {{"vae-job", "--help"}, "--weights-dtype f32|bf16"},
      {{"seedvr2", "--help"}, "--channels A,B,C,D"},
      {{"seedvr2", "decode", "--frames", "5", "--help"}, "--norm-groups"},
      {{"seedvr2-upscale", "--help"}, "--color-fix wavelet|adain|none"},
  };
  for (const auto& [args, flag] : cases) {
    const CommandResult r = wmbench(args);
    EXPECT_EQ(r.exit_code, 0) << args.front() << ": " << r.output;
    EXPECT_EQ(r.output.rfind("usage: wmbench " + args.front(), 0), 0u) << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args.front() << ": " << r.output;
  }
}

// The --help after --devices was once taken as the device list (an uncaught ConfigError).
TEST_F(BenchArgs, DevicesHelpIsTheDevicesUsage) {
  const CommandResult r = wmbench({"upscale", "--devices", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("usage: wmbench upscale [--devices 0,1,..|cpu]", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("--lanes"), std::string::npos) << r.output;
}

TEST_F(BenchArgs, UsageErrorsAreOneLineAndExit64) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"upscale", "--bogus"}, "wmbench upscale: unknown option '--bogus'"},
      {{"upscale", "--devices", "--ranks", "2"},
       "wmbench upscale: --devices needs a value (got the option --ranks)"},
      {{"upscale", "--devices", "cpu", "--inputs"}, "wmbench upscale: --inputs needs a value"},
      {{"upscale", "--devices", "cpu", "--inputs", "0"},
       "wmbench upscale: --inputs: expected an integer >= 1, got '0'"},
      {{"upscale", "--devices", "cpu", "--make", "64x48"},
       "wmbench upscale: --make: expected WxH:N, got '64x48'"},
      {{"upscale", "--devices", "cpu", "--model", "nope"}, "wmbench upscale: --model: "},
      {{"upscale", "--crf", "x"}, "wmbench upscale: --crf: expected an integer >= 0, got 'x'"},
      {{"upscale", "--model", "realesr-animevideov3", "--size", "64"},
       "wmbench upscale: --size: expected WxH, got '64'"},
      {{"e2e", "--model", "realesr-animevideov3", "--precision", "fp8"},
       "wmbench e2e: --precision: expected fp16|bf16|fp32, got 'fp8'"},
      {{"e2e", "--device", "gpu"}, "wmbench e2e: --device: expected cpu or cuda:N, got 'gpu'"},
      {{"segments", "--instances", "-1"},
       "wmbench segments: --instances: expected an integer >= 1, got '-1'"},
      {{"vae-decode", "--dim"}, "wmbench vae-decode: --dim needs a value"},
      {{"vae-job", "--kind", "x"}, "wmbench vae-job: --kind: expected wan2.1-vae|seedvr2-vae"},
      {{"seedvr2", "sideways"}, "wmbench seedvr2 decode|encode: expected decode or encode"},
      {{"seedvr2", "decode", "--frames", "6"},
       "wmbench seedvr2 decode|encode: --frames must be 1 + 4k"},
      {{"seedvr2-upscale", "--model", "9b"}, "wmbench seedvr2-upscale: --model: expected 3b|7b|"},
  };
  for (const auto& [args, line] : cases) {
    const CommandResult r = wmbench(args);
    EXPECT_EQ(r.exit_code, 64) << args.front() << ": " << r.output;
    EXPECT_EQ(r.output.rfind(line, 0), 0u) << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
    EXPECT_NE(r.output.find("--help lists the options"), std::string::npos) << r.output;
  }
}

// A bad device list is the job file's error, named, with its exit code (not an abort).
TEST_F(BenchArgs, DevicesThatAreNotThereEndTheBenchmarkCleanly) {
  TempDir dir("bench-args-devices");
  const CommandResult r = wmbench({"upscale", "--devices", "x", "--inputs", "1", "--make",
                                   "32x24:2", "--warmup", "0", "--workdir", dir.file("work")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << r.output;  // not killed by a signal (an uncaught exception)
  EXPECT_NE(r.output.find("wmbench: "), std::string::npos) << r.output;
}

// `upscale --devices --model M --scale S`: the output is S times the input, as a job with
// model.scale S writes it (it once wrote the network's own ×4); without --scale, the network's.
TEST_F(BenchArgs, DevicesHonoursScaleForANetwork) {
  for (const int scale : {2, 0}) {
    TempDir dir("bench-args-scale");
    std::vector<std::string> args = {"upscale",
                                     "--devices",
                                     "cpu",
                                     "--ranks",
                                     "2",
                                     "--inputs",
                                     "2",
                                     "--make",
                                     "64x48:2",
                                     "--model",
                                     "realesr-animevideov3",
                                     "--warmup",
                                     "0",
                                     "--workdir",
                                     dir.file("work")};
    if (scale) args.insert(args.end(), {"--scale", std::to_string(scale)});
    const CommandResult r = wmbench(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const int expected = scale ? scale : 4;
    const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{\n") + 1));
    EXPECT_EQ(j.at("scale"), expected) << j.dump();
    EXPECT_EQ(j.at("all_devices").at("frames"), 4);
    for (const char* run : {"out_one", "out_all"}) {
      for (const char* name : {"input0.mp4", "input1.mp4"}) {
        const Probe p = probe(dir.file("work") + "/" + run + "/" + name);
        EXPECT_EQ(p.width, 64 * expected) << run << "/" << name;
        EXPECT_EQ(p.height, 48 * expected) << run << "/" << name;
      }
    }
  }
}

}  // namespace
}  // namespace wm::test
