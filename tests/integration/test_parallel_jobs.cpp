// Devices and parallel modes through the real job path (wmbatch on YAML jobs, CPU ranks):
// a decode_latents job split over 2 and 3 sequence-parallel ranks equals the one-rank output and
// reports its exchange; an upscale job whose slices are spread over 3 CPU workers (data
// parallel) equals the one-worker output bit for bit, frames in order; --devices replaces the
// jobs' devices and rejects nonsense. A batch runs its inputs at once on input lanes (CPU ranks)
// with outputs bit-identical to one worker and the report in the inputs' order. A rank that
// fails (the test-only fault injection: out of memory, an error, a hang past the timeout) fails
// its input with one line and exit 1, leaves no output, and the next input of the batch runs.
// Golden weights and latents: tests/data/golden/wan21-tiny.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "parallel/thread_budget.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/";

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
  const std::vector<float> one = read_floats(dir.file("one.safetensors"), "output");
  for (int ranks : {2, 3}) {
    const std::string name = "ranks" + std::to_string(ranks);
    write_text(dir.file(name + ".yaml"),
               decode_job(name + ".safetensors",
                          "parallel: {mode: sequence, ranks: " + std::to_string(ranks) + "}\n"));
    r = wmbatch({"--report", dir.file(name + ".json"), dir.file(name + ".yaml")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double err = max_abs_diff(read_floats(dir.file(name + ".safetensors"), "output"), one);
    std::cout << "[ ranks    ] job, " << ranks << " CPU ranks: max diff " << err << "\n";
    EXPECT_LE(err, 1e-5);
    const nlohmann::json in = report_input(dir.file(name + ".json"));
    EXPECT_GT(in.at("exchange_bytes").get<double>(), 0) << in.dump();
    EXPECT_EQ(in.at("exchange_nccl").get<double>(), 0) << in.dump();  // in-process, as asked
    for (int rank = 1; rank < ranks; ++rank) {
      EXPECT_TRUE(in.contains("device_cpu." + std::to_string(rank) + "_busy_seconds")) << in.dump();
    }
    // Split in time, the ranks' frames add up to the output's, every rank with some.
    double frames = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      const std::string key =
          "device_cpu" + (rank ? "." + std::to_string(rank) : std::string()) + "_frames";
      ASSERT_TRUE(in.contains(key)) << in.dump();
      EXPECT_GT(in.at(key).get<double>(), 0) << key;
      frames += in.at(key).get<double>();
    }
    EXPECT_EQ(frames, in.at("frames").get<double>()) << in.dump();
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
  double frames = 0;
  for (const char* worker : {"device_cpu", "device_cpu.1", "device_cpu.2"}) {
    EXPECT_TRUE(in.contains(std::string(worker) + "_busy_seconds")) << in.dump();
    ASSERT_TRUE(in.contains(std::string(worker) + "_frames")) << in.dump();
    frames += in.at(std::string(worker) + "_frames").get<double>();
  }
  // Each slice ran on one rank: the ranks' frames add up to the video's.
  EXPECT_EQ(frames, 24) << in.dump();
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
       {std::string("parallel: {ranks: 0}\n"), std::string("parallel: {mode: diagonal}\n"),
        std::string("parallel: {exchange: mpi}\n")}) {
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

// NCCL is opt-in and needs a GPU per rank (and a build with it): CPU ranks asking for it fail
// before any input runs, with a line that names the alternative; in-process, said outright,
// runs.
TEST(ParallelJobs, NcclExchangeNeedsAGpuPerRank) {
  TempDir dir("parallel-exchange");
  write_text(
      dir.file("nccl.yaml"),
      decode_job("nccl.safetensors", "parallel: {mode: sequence, ranks: 2, exchange: nccl}\n"));
  CommandResult r = wmbatch({dir.file("nccl.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("exchange nccl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in-process"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("nccl.safetensors")));
  write_text(dir.file("ip.yaml"), decode_job("ip.safetensors",
                                             "parallel: {mode: sequence, ranks: 2, exchange: "
                                             "in-process}\n"));
  r = wmbatch({dir.file("ip.yaml")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("ip.safetensors")));
}

nlohmann::json report_inputs(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in).at(0).at("inputs");
}

// Clips of different sizes and lengths, so that a mix-up of outputs or report lines shows.
std::vector<std::string> make_clips(TempDir& dir, int count) {
  // yuv420p written as yuv444p: every job here runs the RGB float pipeline (a one-worker job on
  // a source it could keep would take the YUV-native resampler, whose rounding differs from the
  // pipeline's by a level).
  return make_batch_clips(dir, count, "yuv420p", [](int i) {
    return std::array<int, 3>{32 + 8 * i, 24 + 4 * i, 6 + 3 * i};
  });
}

std::string batch_job(const std::vector<std::string>& clips, const std::string& out_dir,
                      const std::string& parallel) {
  std::string yaml = "task: upscale\ninput:\n";
  for (const std::string& c : clips) yaml += "  - " + c + "\n";
  return yaml + "output: " + out_dir + "/{stem}.mkv\nmodel: {kind: lanczos, scale: 2}\n" +
         "devices: cpu\nslice_frames: 2\ntokens: 4\nencode: {codec: ffv1, pix_fmt: yuv444p}\n" +
         parallel;
}

// No file at `path` and no partial file beside it.
void expect_no_output(const std::string& path) {
  EXPECT_FALSE(exists(path)) << path;
  const std::filesystem::path p(path);
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find(p.filename().string() + "."), std::string::npos)
        << e.path();
  }
}

TEST(ParallelJobs, BatchOnInputLanesEqualsOneWorkerInOrder) {
  TempDir dir("parallel-lanes");
  const std::vector<std::string> clips = make_clips(dir, 5);
  write_text(dir.file("one.yaml"), batch_job(clips, "one", ""));
  CommandResult r = wmbatch({"--report", dir.file("one.json"), dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 3 lanes of one rank; 2 lanes of 2 ranks (each input's slices spread over its two).
  for (const std::string& parallel :
       {std::string("parallel: {mode: data, ranks: 3}\n"),
        std::string("parallel: {mode: data, ranks: 4, inputs: 2}\n")}) {
    std::filesystem::remove_all(dir.file("lanes"));
    write_text(dir.file("lanes.yaml"), batch_job(clips, "lanes", parallel));
    r = wmbatch({"--report", dir.file("lanes.json"), dir.file("lanes.yaml")});
    ASSERT_EQ(r.exit_code, 0) << parallel << r.output;
    const nlohmann::json inputs = report_inputs(dir.file("lanes.json"));
    ASSERT_EQ(inputs.size(), clips.size()) << inputs.dump();
    // CPU ranks never add lanes of their own (no device memory to size them by).
    std::ifstream report(dir.file("lanes.json"));
    EXPECT_EQ(nlohmann::json::parse(report).at(0).at("input_lanes"),
              parallel.find("inputs: 2") != std::string::npos ? 2 : 3)
        << parallel;
    std::set<std::string> workers;
    for (size_t i = 0; i < clips.size(); ++i) {
      const nlohmann::json& in = inputs.at(i);
      EXPECT_EQ(std::filesystem::path(in.at("input").get<std::string>()).filename(), clips[i])
          << "report order, " << parallel;
      EXPECT_EQ(in.at("state"), "done");
      for (const auto& [key, value] : in.items()) {
        if (key.rfind("device_", 0) == 0) workers.insert(key);
      }
      const std::string stem = clips[i].substr(0, clips[i].size() - 4);
      const auto a = read_all(dir.file("one/" + stem + ".mkv"));
      const auto b = read_all(dir.file("lanes/" + stem + ".mkv"));
      ASSERT_EQ(a.size(), size_t(6 + 3 * i));
      ASSERT_EQ(a.size(), b.size()) << clips[i];
      for (size_t f = 0; f < a.size(); ++f) {
        EXPECT_EQ(a[f].pts, b[f].pts) << clips[i] << " frame " << f;
        EXPECT_TRUE(a[f].image.data == b[f].image.data) << clips[i] << " frame " << f;
      }
    }
    // Every lane's worker ran inputs (busy time reported under its name).
    for (const char* w :
         {"device_cpu_busy_seconds", "device_cpu.1_busy_seconds", "device_cpu.2_busy_seconds"}) {
      EXPECT_TRUE(workers.count(w)) << w << " " << parallel;
    }
  }
}

// Two input lanes share the host's cores (parallel/thread_budget.h): the job logs the budget each
// input gets and the report carries it; a one-lane job keeps the whole host per input.
TEST(ParallelJobs, InputLanesReportAndLogTheirThreadBudget) {
  TempDir dir("parallel-budget");
  const std::vector<std::string> clips = make_clips(dir, 3);
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  const int lane_cores = std::max(1, cores / 2);
  for (const std::string& parallel :
       {std::string("parallel: {mode: data, ranks: 2, inputs: 2}\n"), std::string("")}) {
    const bool lanes = !parallel.empty();
    std::filesystem::remove_all(dir.file("out"));
    write_text(dir.file("job.yaml"), batch_job(clips, "out", parallel));
    const CommandResult r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
    ASSERT_EQ(r.exit_code, 0) << parallel << r.output;
    std::ifstream report(dir.file("job.json"));
    const nlohmann::json job = nlohmann::json::parse(report).at(0);
    ASSERT_TRUE(job.contains("thread_budget")) << job.dump();
    // When each input began, from the job's start: within the job; one lane runs them in order,
    // two start the first two at once and the third waits for a lane to be through the model with
    // its first (whose output may still be finishing: writer_finish_seconds, in its seconds).
    const nlohmann::json& ins = job.at("inputs");
    ASSERT_EQ(ins.size(), 3u);
    std::vector<double> started, ended, through;
    for (const nlohmann::json& in : ins) {
      started.push_back(in.at("started_seconds").get<double>());
      ended.push_back(started.back() + in.at("seconds").get<double>());
      through.push_back(ended.back() - in.at("writer_finish_seconds").get<double>());
      EXPECT_GE(started.back(), 0.0);
      EXPECT_LE(ended.back(), job.at("seconds").get<double>() + 1e-6);
    }
    if (lanes) {
      // (The first two lanes' threads start in either order.)
      EXPECT_GE(started[2], std::min(through[0], through[1]) - 1e-6);
    } else {
      EXPECT_LE(started[0], started[1]);
      EXPECT_LE(started[1], started[2]);
    }
    const nlohmann::json& b = job.at("thread_budget");
    EXPECT_EQ(b.at("cores"), cores);
    EXPECT_EQ(b.at("lanes"), lanes ? 2 : 1);
    EXPECT_EQ(b.at("lane_cores"), lanes ? lane_cores : cores);
    EXPECT_EQ(b.at("decode_threads"), lanes ? lane_cores : cores);
    // x264's ratio of the lane's cores (one lane: what libav's auto gives x264 of the host).
    // Several encoders side by side: 3 per lane core, at most x264's auto for the whole host.
    EXPECT_EQ(b.at("encoder_threads"),
              std::max(1, lanes ? std::min(3 * lane_cores, 3 * cores / 2) : 3 * cores / 2));
    EXPECT_EQ(b.at("tbb_threads"), lanes ? lane_cores : cores);
    EXPECT_EQ(b.at("convert_threads"), 1);
    EXPECT_EQ(b.at("torch_threads"), cores);
    const std::string line = "thread budget per input: " + std::to_string(cores) +
                             " cores, 2 lanes of " + std::to_string(lane_cores) + ": decode " +
                             std::to_string(lane_cores);
    if (lanes) {
      EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
    } else {
      EXPECT_EQ(r.output.find("thread budget per input"), std::string::npos) << r.output;
    }
    for (const std::string& clip : clips) {
      EXPECT_TRUE(
          std::filesystem::exists(dir.file("out/" + clip.substr(0, clip.size() - 4) + ".mkv")))
          << clip;
    }
  }
}

TEST(ParallelJobs, SequenceRanksOnTwoInputLanesEqualOneRank) {
  // 4 CPU ranks, 2 inputs at once: each input decoded by a window of 2 ranks (worker lanes 0-1
  // and 2-3).
  TempDir dir("parallel-seq-lanes");
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("a.safetensors"));
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("b.safetensors"));
  write_text(dir.file("one.yaml"), decode_job("one.safetensors", ""));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_text(dir.file("job.yaml"),
             "task: decode_latents\ninput: [a.safetensors, b.safetensors]\ninput_tensor: input\n"
             "output: out/{stem}.safetensors\nslice_frames: 5\ndevices: cpu\n"
             "parallel: {mode: sequence, ranks: 4, inputs: 2}\nmodel: {kind: wan2.1-vae, "
             "weights: '" +
                 kGolden + "weights.safetensors', dim: 16}\n");
  r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json inputs = report_inputs(dir.file("job.json"));
  ASSERT_EQ(inputs.size(), 2u);
  const std::vector<float> one = read_floats(dir.file("one.safetensors"), "output");
  for (const char* name : {"a", "b"}) {
    EXPECT_LE(
        max_abs_diff(read_floats(dir.file(std::string("out/") + name + ".safetensors"), "output"),
                     one),
        1e-5)
        << name;
  }
  EXPECT_TRUE(inputs[0].contains("device_cpu.1_busy_seconds")) << inputs[0].dump();
  EXPECT_TRUE(inputs[1].contains("device_cpu.3_busy_seconds")) << inputs[1].dump();
  EXPECT_GT(inputs[1].at("exchange_bytes").get<double>(), 0);
}

TEST(ParallelJobs, FailingDataRankFailsItsInputAndTheBatchGoesOn) {
  TempDir dir("parallel-lane-fault");
  const std::vector<std::string> clips = make_clips(dir, 4);
  write_text(
      dir.file("job.yaml"),
      batch_job(clips, "out", "parallel: {mode: data, ranks: 3, fault: 'rank1:slice1:oom'}\n"));
  CommandResult r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json inputs = report_inputs(dir.file("job.json"));
  ASSERT_EQ(inputs.size(), 4u);
  // Input 1 starts on lane 1 (rank 1); the fault fires once, so every other input is done.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string stem = clips[i].substr(0, clips[i].size() - 4);
    if (i == 1) {
      EXPECT_EQ(inputs[i].at("state"), "failed");
      const std::string error = inputs[i].at("error");
      EXPECT_NE(error.find("clip1.mkv"), std::string::npos) << error;
      EXPECT_NE(error.find("rank 1 (cpu), slice 1: out of device memory"), std::string::npos)
          << error;
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
      EXPECT_EQ(inputs[i].at("exit_code"), 1);
      expect_no_output(dir.file("out/" + stem + ".mkv"));
    } else {
      EXPECT_EQ(inputs[i].at("state"), "done") << inputs[i].dump();
      EXPECT_EQ(read_all(dir.file("out/" + stem + ".mkv")).size(), size_t(6 + 3 * i));
    }
  }
}

// A batch of two latent files decoded by `ranks` sequence-parallel ranks, with a fault: the first
// input fails (exit 1, one line naming it and the rank), leaves nothing, the second equals one
// rank.
void check_sequence_fault(int ranks, const std::string& fault,
                          const std::vector<std::string>& expected, int exit_code,
                          const std::string& extra = "") {
  TempDir dir("parallel-seq-fault");
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("a.safetensors"));
  std::filesystem::copy_file(kGolden + "decode_t9.safetensors", dir.file("b.safetensors"));
  auto job = [&](const std::string& out, const std::string& parallel) {
    return "task: decode_latents\ninput: [a.safetensors, b.safetensors]\ninput_tensor: input\n"
           "output: " +
           out + "/{stem}.safetensors\nslice_frames: 5\ndevices: cpu\n" + parallel +
           "model: {kind: wan2.1-vae, weights: '" + kGolden + "weights.safetensors', dim: 16}\n";
  };
  write_text(dir.file("one.yaml"), job("one", ""));
  CommandResult r = wmbatch({dir.file("one.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_text(dir.file("job.yaml"),
             job("out", "parallel: {mode: sequence, ranks: " + std::to_string(ranks) +
                            ", fault: '" + fault + "'" + extra + "}\n"));
  r = wmbatch({"--report", dir.file("job.json"), dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  const nlohmann::json inputs = report_inputs(dir.file("job.json"));
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].at("state"), "failed");
  const std::string error = inputs[0].value("error", "");
  std::cout << "[ fault    ] " << ranks << " ranks, " << fault << ": " << error << "\n";
  EXPECT_NE(error.find("a.safetensors"), std::string::npos) << error;
  for (const std::string& part : expected) EXPECT_NE(error.find(part), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(inputs[0].value("exit_code", 0), exit_code);
  expect_no_output(dir.file("out/a.safetensors"));
  EXPECT_EQ(inputs[1].at("state"), "done") << inputs[1].dump();
  EXPECT_LE(max_abs_diff(read_floats(dir.file("out/b.safetensors"), "output"),
                         read_floats(dir.file("one/b.safetensors"), "output")),
            1e-5);
}

TEST(ParallelJobs, FailingSequenceRankFailsItsInputAndTheBatchGoesOn) {
  // Out of memory in rank 1 mid-decode (its first exchange of slice 1), 2 ranks: exit 1 (a
  // retry may pass).
  check_sequence_fault(2, "rank1:slice1:oom", {"rank 1 (cpu), slice 1: ", "out of device memory"},
                       1);
  // A device error in the last of 4 ranks, in the first slice (the model's error: exit 65).
  check_sequence_fault(4, "rank3:slice0:error", {"rank 3 (cpu), slice 0: ", "CUDA error"}, 65);
  // Rank 2 of 4 stops answering: its peers wait on it until the timeout aborts the exchange.
  // Whichever times out first: the session ("slice 1: ranks 0-3 did not finish within 2 s") or a
  // peer's in-process receive ("rank 3 waited 2 s for rank 2").
  check_sequence_fault(4, "rank2:slice1:hang", {" 2 s"}, 1, ", timeout: 2");
}

TEST(ParallelJobs, BadFaultKey) {
  TempDir dir("parallel-fault-key");
  write_text(dir.file("job.yaml"), decode_job("out.safetensors", "parallel: {fault: 'rank1'}\n"));
  CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("rank<R>:slice<S>"), std::string::npos) << r.output;
}

TEST(ParallelJobs, BenchUpscaleDevicesOnCpuRanks) {
  TempDir dir("parallel-bench");
  const CommandResult r = run_command(
      {std::string(WM_BINARY_DIR) + "/wmbench", "upscale", "--devices", "cpu", "--ranks", "2",
       "--inputs", "3", "--make", "64x48:4", "--warmup", "0", "--workdir", dir.file("work")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j.at("all_devices").at("input_lanes"), 2);
  EXPECT_EQ(j.at("one_device").at("frames"), 12);
  EXPECT_EQ(j.at("all_devices").at("frames"), 12);
  EXPECT_GT(j.at("speed_up").get<double>(), 0);
  EXPECT_TRUE(j.at("all_devices").at("device_busy_seconds").contains("device_cpu.1_busy_seconds"))
      << j.dump();
  EXPECT_TRUE(j.at("all_devices").at("stage_seconds").contains("stage_model_seconds"));
  // The host's CPU over the run: some, and no more than all of its cores.
  for (const char* run : {"one_device", "all_devices"}) {
    EXPECT_GT(j.at(run).at("cpu_seconds").get<double>(), 0.0) << run;
    EXPECT_GT(j.at(run).at("host_cpu_share").get<double>(), 0.0) << run;
    EXPECT_LE(j.at(run).at("host_cpu_share").get<double>(), 1.05) << run;
  }
  const std::string bound = j.at("all_devices").at("bound");
  EXPECT_TRUE(bound == "decode" || bound == "model" || bound == "encode") << bound;
  // The encoder alone, on the run's own frames (its lossless run), in its lanes: every frame
  // encoded at the output size, and the run's share of that ceiling from the same numbers.
  const nlohmann::json& c = j.at("encode_ceiling");
  ASSERT_TRUE(c.contains("fps")) << c.dump();
  EXPECT_EQ(c.at("frames"), 12);
  EXPECT_EQ(c.at("lanes"), j.at("all_devices").at("input_lanes"));
  EXPECT_NEAR(j.at("of_ceiling").get<double>(),
              j.at("all_devices").at("fps").get<double>() / c.at("fps").get<double>(), 1e-9);
  // Every thread split was encoded — one thread per lane core, 1.5 per lane core, the budget's,
  // the encoder's own auto; equal counts once — and the ceiling is the fastest.
  const nlohmann::json& splits = c.at("splits");
  const wm::parallel::ThreadBudget budget =
      wm::parallel::thread_budget(wm::parallel::host_cores(), c.at("lanes").get<int>());
  std::vector<int> expected{budget.lane_cores, std::max(1, 3 * budget.lane_cores / 2),
                            budget.encoder_threads, 0};
  expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
  ASSERT_EQ(splits.size(), expected.size()) << c.dump();
  double best = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    EXPECT_EQ(splits[i].at("encoder_threads"), expected[i]) << c.dump();
    EXPECT_GT(splits[i].at("host_cpu_share").get<double>(), 0.0) << c.dump();
    EXPECT_LE(splits[i].at("host_cpu_share").get<double>(), 1.05) << c.dump();
    best = std::max(best, splits[i].at("fps").get<double>());
  }
  EXPECT_DOUBLE_EQ(c.at("fps").get<double>(), best);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "input" + std::to_string(i) + ".mp4";
    const Probe again = probe(dir.file("work/out_ceiling/" + name));
    const Probe job = probe(dir.file("work/out_all/" + name));
    EXPECT_EQ(again.width, 128);
    EXPECT_EQ(again.height, 96);
    EXPECT_EQ(again.video_frames, 4);
    // The ceiling encoded the job's frames as the job's lossless run wrote them (FFV1), with
    // the job's timing (in seconds: the containers' time bases differ).
    const Probe lossless = probe(dir.file("work/out_lossless/input" + std::to_string(i) + ".nut"));
    EXPECT_EQ(lossless.codec, "ffv1");
    EXPECT_EQ(lossless.video_frames, 4);
    auto seconds = [](const Probe& p) {
      std::vector<double> t;
      for (int64_t pts : p.video_pts) {
        t.push_back(double(pts) * p.video_time_base.num / p.video_time_base.den);
      }
      return t;
    };
    const std::vector<double> a = seconds(again), b = seconds(job), l = seconds(lossless);
    ASSERT_EQ(a.size(), b.size()) << name;
    ASSERT_EQ(l.size(), b.size()) << name;
    for (size_t f = 0; f < a.size(); ++f) {
      EXPECT_NEAR(a[f], b[f], 1e-6) << name << " frame " << f;
      EXPECT_NEAR(l[f], b[f], 1e-6) << name << " frame " << f;
    }
  }
}

// Rounds: each --encode-threads count's job and the ceiling again, interleaved; each job against
// its own round's ceiling, the first round the runs the JSON already has, and the medians from
// the rounds. The cores busy over a run: one value per quarter second, encoders and others.
TEST(ParallelJobs, BenchUpscaleDevicesRoundsAndBusyCores) {
  TempDir dir("parallel-bench-rounds");
  // The flags of a tiny batch on two CPU ranks, the rounds' flags after them.
  std::vector<std::string> command = {std::string(WM_BINARY_DIR) + "/wmbench", "upscale"};
  std::istringstream flags(
      "--devices cpu --ranks 2 --inputs 2 --make 64x48:4 --warmup 0 --skip-one "
      "--encode-threads 0,1 --repeat 3 --ceiling-threads 1 --workdir");
  for (std::string flag; flags >> flag;) command.push_back(flag);
  command.push_back(dir.file("work"));
  const CommandResult r = run_command(command);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_FALSE(j.contains("one_device"));
  EXPECT_FALSE(j.contains("speed_up"));
  ASSERT_EQ(j.at("encode_ceiling").at("splits").size(), 1u);
  EXPECT_EQ(j.at("encode_ceiling").at("encoder_threads"), 1);
  const nlohmann::json& rounds = j.at("rounds");
  ASSERT_EQ(rounds.size(), 3u) << j.dump();
  std::vector<std::vector<double>> ratios(2);
  for (size_t k = 0; k < rounds.size(); ++k) {
    const nlohmann::json& jobs = rounds[k].at("jobs");
    ASSERT_EQ(jobs.size(), 2u);
    const double ceiling = rounds[k].at("ceiling_fps");
    EXPECT_GT(ceiling, 0.0);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(jobs[t].at("encode_threads"), int(t));
      EXPECT_NEAR(jobs[t].at("of_ceiling").get<double>(), jobs[t].at("fps").get<double>() / ceiling,
                  1e-9);
      ratios[t].push_back(jobs[t].at("of_ceiling"));
    }
  }
  // The first round is the run above and the first ceiling.
  EXPECT_DOUBLE_EQ(rounds[0].at("jobs")[0].at("fps").get<double>(),
                   j.at("all_devices").at("fps").get<double>());
  EXPECT_DOUBLE_EQ(rounds[0].at("ceiling_fps").get<double>(),
                   j.at("encode_ceiling").at("fps").get<double>());
  const nlohmann::json& medians = j.at("of_ceiling_median");
  ASSERT_EQ(medians.size(), 2u);
  for (size_t t = 0; t < 2; ++t) {
    std::sort(ratios[t].begin(), ratios[t].end());
    EXPECT_EQ(medians[t].at("encode_threads"), int(t));
    EXPECT_DOUBLE_EQ(medians[t].at("of_ceiling").get<double>(), ratios[t][1]);
  }
  for (const nlohmann::json* busy :
       {&j.at("all_devices").at("cores_busy"), &j.at("encode_ceiling").at("cores_busy")}) {
    EXPECT_EQ(busy->at("bucket_seconds"), 0.25);
    const size_t n = busy->at("encode").size();
    EXPECT_GE(n, 1u) << busy->dump();
    EXPECT_EQ(busy->at("other").size(), n) << busy->dump();
  }
}

}  // namespace
}  // namespace wm::test
