// Replays the fuzzers' seed corpus and every crasher kept as a regression
// (tests/fuzz/{corpus,regressions}/<harness>/) through the harness bodies (tests/fuzz/targets.h),
// in the normal build and in the sanitizer build (scripts/sanitize.sh), without libFuzzer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;

namespace {

const char* const kHarnesses[] = {"job_spec",     "safetensors",  "video_reader", "watch_spec",
                                  "http_request", "torch_pickle", "image_header"};

struct FuzzInput {
  std::string harness;  // one of kHarnesses
  std::string kind;     // corpus | regressions
  fs::path path;
};

std::vector<FuzzInput> all_inputs() {
  std::vector<FuzzInput> inputs;
  const fs::path root = fs::path(WM_SOURCE_DIR) / "tests" / "fuzz";
  for (const char* harness : kHarnesses) {
    for (const char* kind : {"corpus", "regressions"}) {
      const fs::path dir = root / kind / harness;
      if (!fs::is_directory(dir)) continue;
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) inputs.push_back({harness, kind, f});
    }
  }
  return inputs;
}

std::string test_name(const ::testing::TestParamInfo<FuzzInput>& info) {
  std::string name =
      info.param.harness + "_" + info.param.kind + "_" + info.param.path.filename().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class FuzzInputs : public ::testing::TestWithParam<FuzzInput> {};

TEST_P(FuzzInputs, KeepsTheErrorContract) {
  const FuzzInput& in = GetParam();
  std::ifstream file(in.path, std::ios::binary);
  ASSERT_TRUE(file) << in.path;
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  std::string problem;
  if (in.harness == "job_spec") problem = wm::fuzz::job_spec(data, bytes.size());
  if (in.harness == "safetensors") problem = wm::fuzz::safetensors(data, bytes.size());
  if (in.harness == "video_reader") problem = wm::fuzz::video_reader(data, bytes.size());
  if (in.harness == "torch_pickle") problem = wm::fuzz::torch_pickle(data, bytes.size());
  if (in.harness == "image_header") problem = wm::fuzz::image_header(data, bytes.size());
  if (in.harness == "watch_spec") problem = wm::fuzz::watch_spec(data, bytes.size());
  if (in.harness == "http_request") problem = wm::fuzz::http_request(data, bytes.size());
  EXPECT_EQ(problem, "") << in.path;
}

TEST(FuzzInputs, EveryHarnessHasSeeds) {
  const std::vector<FuzzInput> inputs = all_inputs();
  for (const char* harness : kHarnesses) {
    EXPECT_TRUE(std::any_of(inputs.begin(), inputs.end(), [&](const FuzzInput& in) {
      return in.harness == harness && in.kind == "corpus";
    })) << harness;
  }
}

INSTANTIATE_TEST_SUITE_P(Replay, FuzzInputs, ::testing::ValuesIn(all_inputs()), test_name);

}  // namespace
