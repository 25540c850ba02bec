// Spatial parallelism through the real job path (wmbatch on YAML jobs, CPU ranks): a
// decode_latents job split into bands of rows over 2 and 3 ranks equals the one-rank output and
// reports its exchange; auto takes rows on CPU ranks where every rank gets 2 latent rows and
// time otherwise; mode spatial with fewer than 2 latent rows per rank, or with a model that cannot
// split by rows, is refused with exit 65 and one line; a failing rank fails its input without a
// hang or an output.
// Golden weights and latents: tests/data/golden/wan21-tiny (9 latent frames of 6×10).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

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

std::string decode_job(const std::string& output, const std::string& extra) {
  return "task: decode_latents\ninput: '" + kGolden +
         "decode_t9.safetensors'\ninput_tensor: input\noutput: " + output + "\ndevices: cpu\n" +
         extra + "model: {kind: wan2.1-vae, weights: '" + kGolden +
         "weights.safetensors', dim: 16}\n";
}

// Decodes with `extra` job keys; returns the output tensor (empty on failure).
std::vector<float> decode(TempDir& dir, const std::string& name, const std::string& extra) {
  write_text(dir.file(name + ".yaml"), decode_job(name + ".safetensors", extra));
  const CommandResult r = wmbatch({"--report", dir.file(name + ".json"), dir.file(name + ".yaml")});
  EXPECT_EQ(r.exit_code, 0) << name << ": " << r.output;
  if (r.exit_code != 0) return {};
  return read_floats(dir.file(name + ".safetensors"), "output");
}

TEST(SpatialJobs, SpatialRanksEqualOneRank) {
  TempDir dir("spatial-ranks");
  const std::vector<float> one = decode(dir, "one", "slice_frames: 5\n");
  ASSERT_FALSE(one.empty());
  for (int ranks : {2, 3}) {
    const std::string name = "ranks" + std::to_string(ranks);
    const std::vector<float> got = decode(
        dir, name,
        "slice_frames: 5\nparallel: {mode: spatial, ranks: " + std::to_string(ranks) + "}\n");
    ASSERT_EQ(got.size(), one.size());
    const double err = max_abs_diff(got, one);
    std::cout << "[ bands    ] job, " << ranks << " spatial CPU ranks: max diff " << err << "\n";
    EXPECT_LE(err, 1e-5);
    const nlohmann::json in = report_input(dir.file(name + ".json"));
    EXPECT_GT(in.at("exchange_bytes").get<double>(), 0) << in.dump();
    EXPECT_EQ(in.at("parallel_spatial_slices").get<double>(), 2) << in.dump();
    EXPECT_EQ(in.at("parallel_sequence_slices").get<double>(), 0) << in.dump();
    for (int rank = 1; rank < ranks; ++rank) {
      EXPECT_TRUE(in.contains("device_cpu." + std::to_string(rank) + "_busy_seconds")) << in.dump();
    }
  }
}

TEST(SpatialJobs, AutoChoosesRowsOrTime) {
  TempDir dir("spatial-auto");
  // 2 CPU ranks on 6 latent rows: rows; 4 ranks: time (fewer than 2 latent rows per rank).
  const std::vector<float> one = decode(dir, "one", "slice_frames: 5\n");
  ASSERT_FALSE(one.empty());
  const std::vector<float> rows = decode(dir, "rows", "slice_frames: 5\nparallel: {ranks: 2}\n");
  ASSERT_EQ(rows.size(), one.size());
  EXPECT_LE(max_abs_diff(rows, one), 1e-5);
  nlohmann::json in = report_input(dir.file("rows.json"));
  EXPECT_EQ(in.at("parallel_spatial_slices").get<double>(), 2) << in.dump();
  EXPECT_EQ(in.at("parallel_sequence_slices").get<double>(), 0) << in.dump();

  const std::vector<float> time = decode(dir, "time", "slice_frames: 5\nparallel: {ranks: 4}\n");
  ASSERT_EQ(time.size(), one.size());
  EXPECT_LE(max_abs_diff(time, one), 1e-5);
  in = report_input(dir.file("time.json"));
  EXPECT_EQ(in.at("parallel_spatial_slices").get<double>(), 0) << in.dump();
  EXPECT_EQ(in.at("parallel_sequence_slices").get<double>(), 2) << in.dump();
}

TEST(SpatialJobs, FailingRankFailsTheInputWithoutHanging) {
  TempDir dir("spatial-fault");
  struct Case {
    std::string fault, expect;
    int exit_code;
  };
  for (const Case& c : {Case{"rank1:slice0:error", "rank 1 (cpu), slice 0: ", 65},
                        Case{"rank1:slice1:hang", " 2 s", 1}}) {
    write_text(dir.file("job.yaml"),
               decode_job("out.safetensors",
                          "slice_frames: 5\nparallel: {mode: spatial, ranks: 2, "
                          "timeout: 2, fault: '" +
                              c.fault + "'}\n"));
    const CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, c.exit_code) << c.fault << ": " << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.fault << ": " << r.output;
    EXPECT_FALSE(exists(dir.file("out.safetensors"))) << c.fault;
  }
}

TEST(SpatialJobs, RefusedWhereItCannotSplit) {
  TempDir dir("spatial-refused");
  // 6 latent rows on 4 ranks: fewer than 2 rows per rank.
  write_text(dir.file("narrow.yaml"),
             decode_job("narrow.safetensors", "parallel: {mode: spatial, ranks: 4}\n"));
  CommandResult r = wmbatch({dir.file("narrow.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(dir.file("narrow.yaml")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 latent rows per rank"), std::string::npos) << r.output;
  EXPECT_FALSE(exists(dir.file("narrow.safetensors")));

  // A model without spatial support (an upscaler: data mode).
  ClipSpec spec;
  spec.width = 32;
  spec.height = 32;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mkv"), spec);
  write_text(dir.file("up.yaml"),
             "task: upscale\ninput: in.mkv\noutput: out.mkv\nmodel: {kind: lanczos, scale: 2}\n"
             "devices: cpu\nparallel: {mode: spatial, ranks: 2}\n");
  r = wmbatch({dir.file("up.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("mode spatial"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use data"), std::string::npos) << r.output;

  // SeedVR2's decoder: its GroupNorm needs whole-frame statistics (sequence splits it in time).
  const std::string seedvr2 = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/";
  write_text(dir.file("seedvr2.yaml"), "task: decode_latents\ninput: '" + seedvr2 +
                                           "decode_t1.safetensors'\noutput: s.safetensors\n"
                                           "devices: cpu\nparallel: {mode: spatial, ranks: 2}\n"
                                           "model: {kind: seedvr2-vae, weights: '" +
                                           seedvr2 + "weights.safetensors', norm_groups: 4}\n");
  r = wmbatch({dir.file("seedvr2.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("seedvr2-vae decode does not"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use sequence"), std::string::npos) << r.output;
}

// wmbench with `args` (the dim-16 model on 2 CPU ranks of one thread, 64×64, one timed run):
// its JSON (empty when it failed).
nlohmann::json bench(std::vector<std::string> args) {
  args.insert(args.begin(), {std::string(WM_BINARY_DIR) + "/wmbench", "vae-decode"});
  for (const char* a : {"--dim", "16", "--height", "64", "--width", "64", "--threads", "1",
                        "--warmup", "0", "--iters", "1", "--devices", "cpu", "--ranks", "2"}) {
    args.push_back(a);
  }
  const CommandResult r = run_command(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

// wmbench vae-decode --parallel sequence,spatial on 2 CPU ranks, one latent frame: the time
// split leaves rank 1 idle, the row split keeps both busy and exchanges rows.
TEST(SpatialJobs, BenchMeasuresBothSplits) {
  const nlohmann::json out =
      bench({"--latent-frames", "1", "--parallel", "sequence,spatial", "--scaling", "0"});
  ASSERT_FALSE(out.is_null());
  const nlohmann::json& time = out.at("sequence_parallel");
  const nlohmann::json& rows = out.at("spatial_parallel");
  EXPECT_EQ(time.at("split"), "time");
  EXPECT_EQ(rows.at("split"), "rows");
  EXPECT_EQ(time.at("per_rank").at(1).at("busy_seconds").get<double>(), 0) << time.dump();
  EXPECT_GT(rows.at("per_rank").at(1).at("busy_seconds").get<double>(), 0) << rows.dump();
  EXPECT_GT(rows.at("exchange_bytes").get<double>(), 0) << rows.dump();
  EXPECT_GT(rows.at("fps").get<double>(), 0) << rows.dump();
}

// The scaling model: per rank its compute alone (the ranks one after another), busy and idle
// seconds and what it sent; the speed-up predicted over NVLink, PCIe 5 and with no exchange.
// Three latent frames in slices of 2 + 1 on 2 CPU ranks: in the first slice rank 0 hands each
// layer's history to rank 1, and rank 1 to rank 0 for the next slice (the ring), so both send.
TEST(SpatialJobs, BenchPrintsTheScalingModel) {
  const nlohmann::json out = bench({"--latent-frames", "3", "--slice-frames", "2"});
  ASSERT_FALSE(out.is_null());
  const nlohmann::json& time = out.at("sequence_parallel");
  for (int rank : {0, 1}) {
    const nlohmann::json& row = time.at("per_rank").at(rank);
    EXPECT_GT(row.at("compute_seconds").get<double>(), 0) << row.dump();
    EXPECT_GT(row.at("busy_seconds").get<double>(), 0) << row.dump();
    EXPECT_GE(row.at("idle_seconds").get<double>(), 0) << row.dump();
    EXPECT_GT(row.at("exchange_bytes").get<double>(), 0) << row.dump();
    EXPECT_GE(row.at("exchange_wait_seconds").get<double>(), 0) << row.dump();
  }
  const nlohmann::json& scaling = time.at("scaling");
  const double nvlink = scaling.at("nvlink").at("speedup").get<double>();
  const double pcie = scaling.at("pcie5").at("speedup").get<double>();
  const double ideal = scaling.at("no_exchange").at("speedup").get<double>();
  EXPECT_GT(nvlink, 0) << scaling.dump();
  EXPECT_LE(pcie, nvlink) << scaling.dump();
  EXPECT_LE(nvlink, ideal) << scaling.dump();
}

}  // namespace
}  // namespace wm::test
