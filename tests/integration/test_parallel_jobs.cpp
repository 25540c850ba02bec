// Devices and parallel modes through the real job path (wmbatch on YAML jobs, CPU ranks):
// a decode_latents job split over 2 and 3 sequence-parallel ranks equals the one-rank output and
// reports its exchange; an upscale job whose slices are spread over 3 CPU workers (data
// parallel) equals the one-worker output bit for bit, frames in order; --devices replaces the
// jobs' devices and rejects nonsense. Golden weights and latents: tests/data/golden/wan21-tiny.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/";

CommandResult wmbatch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {wmbatch_path(), "--progress", "none"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

std::vector<float> tensor(const std::string& path, const std::string& name) {
  io::SafetensorsFile file(path);
  const io::TensorInfo& t = file.info(name);
  std::vector<float> out(t.bytes / 4);
  std::memcpy(out.data(), t.data, t.bytes);
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return 1e30;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

nlohmann::json report_input(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at(0).at("inputs").at(0);
}

std::string decode_job(const std::string& output, const std::string& parallel) {
  return "task: decode_latents\ninput: '" + kGolden +
         "decode_t9.safetensors'\ninput_tensor: input\noutput: " + output +
         "\nslice_frames: 5\ndevices: cpu\n" + parallel + "model: {kind: wan2.1-vae, weights: '" +
         kGolden + "weights.safetensors', dim: 16}\n";
}

TEST(ParallelJobs, SequenceRanksEqualOneRank) {
  TempDir dir("parallel-sequence");
  write_text(dir.file("one.yaml"), decode_job("one.safetensors", ""));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<float> one = tensor(dir.file("one.safetensors"), "output");
  for (int ranks : {2, 3}) {
    const std::string name = "ranks" + std::to_string(ranks);
    write_text(dir.file(name + ".yaml"),
               decode_job(name + ".safetensors",
                          "parallel: {mode: sequence, ranks: " + std::to_string(ranks) + "}\n"));
    r = wmbatch({"--report", dir.file(name + ".json"), dir.file(name + ".yaml")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double err = max_abs_diff(tensor(dir.file(name + ".safetensors"), "output"), one);
    std::cout << "[ ranks    ] job, " << ranks << " CPU ranks: max diff " << err << "\n";
    EXPECT_LE(err, 1e-5);
    const nlohmann::json in = report_input(dir.file(name + ".json"));
    EXPECT_GT(in.at("exchange_bytes").get<double>(), 0) << in.dump();
    for (int rank = 1; rank < ranks; ++rank) {
      EXPECT_TRUE(in.contains("device_cpu." + std::to_string(rank) + "_busy_seconds")) << in.dump();
    }
  }
}

TEST(ParallelJobs, DataParallelSlicesKeepOrderAndEqualOneWorker) {
  TempDir dir("parallel-data");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 24;
  spec.codec = "ffv1";
  // A yuv420p source written as yuv444p: both jobs run the RGB float pipeline (the one-worker
  // job would otherwise take the YUV-native path, which keeps the source's format).
  spec.pix_fmt = "yuv420p";
  spec.container_ext = ".mkv";
  spec.audio = false;
  make_clip(dir.file("in.mkv"), spec);
  auto job = [&](const std::string& out, const std::string& parallel) {
    return "task: upscale\ninput: in.mkv\noutput: " + out +
           "\nmodel: {kind: lanczos, scale: 2}\ndevices: cpu\nslice_frames: 3\ntokens: 6\n" +
           "encode: {codec: ffv1, pix_fmt: yuv444p}\n" + parallel;
  };
  write_text(dir.file("one.yaml"), job("one.mkv", ""));
  write_text(dir.file("three.yaml"), job("three.mkv", "parallel: {mode: data, ranks: 3}\n"));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = wmbatch({"--report", dir.file("three.json"), dir.file("three.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = read_all(dir.file("one.mkv"));
  const auto b = read_all(dir.file("three.mkv"));
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pts, b[i].pts) << "frame " << i;
    EXPECT_TRUE(a[i].image.data == b[i].image.data) << "frame " << i;
  }
  const nlohmann::json in = report_input(dir.file("three.json"));
  for (const char* worker :
       {"device_cpu_busy_seconds", "device_cpu.1_busy_seconds", "device_cpu.2_busy_seconds"}) {
    EXPECT_TRUE(in.contains(worker)) << in.dump();
  }
}

TEST(ParallelJobs, DevicesOnTheCommandLine) {
  TempDir dir("parallel-devices");
  // The job asks for GPU 7; --devices cpu replaces it.
  std::string yaml = decode_job("out.safetensors", "");
  yaml.replace(yaml.find("devices: cpu"), 12, "devices: [7]");
  write_text(dir.file("job.yaml"), yaml);
  CommandResult r = wmbatch({"--devices", "cpu", dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(exists(dir.file("out.safetensors")));
  r = wmbatch({"--devices", "zero", dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(r.output.find("--devices: 'zero'"), std::string::npos) << r.output;
}

TEST(ParallelJobs, BadParallelKeys) {
  TempDir dir("parallel-keys");
  for (const std::string& bad :
       {std::string("parallel: {mode: spatial}\n"), std::string("parallel: {ranks: 0}\n"),
        std::string("parallel: {mode: diagonal}\n")}) {
    write_text(dir.file("job.yaml"), decode_job("out.safetensors", bad));
    CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, 65) << bad << r.output;
    EXPECT_NE(r.output.find("parallel"), std::string::npos) << r.output;
  }
  // Sequence parallelism with a model that has no causal state to split.
  write_text(dir.file("up.yaml"),
             "task: upscale\ninput: in.mkv\noutput: out.mkv\nmodel: {kind: lanczos, scale: 2}\n"
             "parallel: {mode: sequence, ranks: 2}\n");
  ClipSpec spec;
  spec.width = 32;
  spec.height = 32;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mkv"), spec);
  CommandResult r = wmbatch({dir.file("up.yaml")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mode sequence"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wm::test
