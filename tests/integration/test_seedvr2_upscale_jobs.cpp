// SeedVR2 (kind seedvr2) through the real job path: wmbatch on YAML jobs against the golden
// vectors (float64 reference of the upstream code; the tiny random-weight DiT and VAE of
// tests/data/golden/seedvr2-dit-tiny and seedvr2-tiny) — the DiT alone (task dit) and the whole
// one-step upscale with every intermediate (debug_tensors) — and on a video clip: output size,
// batches and their seams, audio carried.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/run.h"
#include "tests/support/stored_zip.h"

namespace wm::test {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-dit-tiny/";
const std::string kVae =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/weights.safetensors";

// A tensor of a file as doubles (F32, F64 or U8).
std::vector<double> values(const std::string& path, const std::string& name,
                           std::vector<int64_t>* shape = nullptr) {
  io::SafetensorsFile file(path);
  const io::TensorInfo& t = file.info(name);
  if (shape) *shape = t.shape;
  std::vector<double> out;
  const auto* p = static_cast<const unsigned char*>(t.data);
  if (t.dtype == "F32") {
    for (size_t i = 0; i < t.bytes / 4; ++i) {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      out.push_back(v);
    }
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < t.bytes / 8; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out.push_back(v);
    }
  } else if (t.dtype == "U8") {
    for (size_t i = 0; i < t.bytes; ++i) out.push_back(p[i]);
  } else {
    ADD_FAILURE() << name << ": dtype " << t.dtype;
  }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::string dit_model(const std::string& extra = "") {
  return "model: {kind: seedvr2, dit: '" + kGolden + "weights.safetensors', heads: 2" + extra +
         "}\n";
}

// The whole-upscale job of a golden case (the job shape), its draws from the .f64 file.
std::string upscale_job(const std::string& name, const std::vector<int>& resolution,
                        const std::string& extra = "", bool noise = true) {
  const std::string c = kGolden + name;
  return "task: upscale\ninput: '" + c + ".safetensors'\ninput_tensor: input_video_u8\n" +
         "resolution: [" + std::to_string(resolution[0]) + ", " + std::to_string(resolution[1]) +
         "]\nprecision: fp32\ndevices: cpu\n" + "model: {kind: seedvr2, dit: '" + kGolden +
         "weights.safetensors', vae: '" + kVae + "', heads: 2, norm_groups: 4, text_embedding: '" +
         c + ".safetensors#text_pos'" + (noise ? ", noise: '" + c + ".f64.safetensors'" : "") +
         extra + "}\n";
}

// A pickle int (BININT1, BININT2 or BININT).
std::string pickle_int(int64_t v) {
  std::string s;
  if (v < 256) return s + 'K' + char(v);
  if (v < 65536) {
    s += 'M';
    put_le(s, uint64_t(v), 2);
    return s;
  }
  s += 'J';
  put_le(s, uint64_t(v), 4);
  return s;
}

// `torch.save(t)` of a 2-D float32 tensor as SeedVR2's pos_emb.pt is: one bare tensor, not a dict.
void write_bare_tensor_pt(const std::string& path, const io::TensorInfo& t) {
  ASSERT_EQ(t.dtype, "F32");
  ASSERT_EQ(t.shape.size(), 2u);
  const int64_t rows = t.shape[0], cols = t.shape[1];
  using namespace std::string_literals;  // (the pickle holds NUL bytes)
  std::string p = "\x80\x02"s + "ctorch._utils\n_rebuild_tensor_v2\n(";
  p += "(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"s;
  p += "0X\x03\x00\x00\x00"s + "cpu" + pickle_int(rows * cols) + "tQ";
  p += pickle_int(0) + pickle_int(rows) + pickle_int(cols) + "\x86" + pickle_int(cols) +
       pickle_int(1) + "\x86\x89"s + "ccollections\nOrderedDict\n)RtR.";
  const std::string data(static_cast<const char*>(t.data), t.bytes);
  write_text(
      path,
      stored_zip({{"pos_emb/data.pkl", p}, {"pos_emb/data/0", data}, {"pos_emb/version", "3\n"}}));
}

CommandResult run(const TempDir& dir, const std::string& job, const std::string& output) {
  write_text(dir.file("job.yaml"), "output: " + output + "\non_exists: overwrite\n" + job);
  return wmbatch({dir.file("job.yaml")});
}

// --- the DiT alone -------------------------------------------------------------------------------

TEST(SeedVR2DitJob, EveryGoldenCaseWithinTheFloor) {
  TempDir dir;
  // One job, the four cases as its inputs.
  const std::vector<std::string> names = {"dit_t1_h8w12", "dit_t1_h8w12_ts250", "dit_t5_h8w12",
                                          "dit_t2_h36w50"};
  std::string job = "task: dit\ninput:\n";
  for (const std::string& name : names) job += "  - '" + kGolden + name + ".safetensors'\n";
  job += "precision: fp32\ndevices: cpu\ndebug_tensors: true\n" + dit_model();
  const CommandResult r = run(dir, job, "'{stem}_out.safetensors'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& name : names) {
    const std::string out = dir.file(name + "_out.safetensors");
    const std::string golden = kGolden + name + ".safetensors";
    const double d = max_diff(values(out, "output"), values(golden, "output"));
    EXPECT_LE(d, 1e-4) << name;
    RecordProperty(name + "_output", std::to_string(d));
    // Every stored intermediate.
    io::SafetensorsFile file(golden);
    int compared = 0;
    for (const std::string& n : file.names()) {
      if (n == "vid" || n == "txt" || n == "timestep" || n == "output") continue;
      EXPECT_LE(max_diff(values(out, n), values(golden, n)), 1e-4) << name << " " << n;
      ++compared;
    }
    EXPECT_EQ(compared, name == "dit_t2_h36w50" ? 0 : 13) << name;
  }
}

TEST(SeedVR2DitJob, WrongWeightsFileIsOneLineExit65) {
  TempDir dir;
  // The VAE's weights given as the DiT's: named, with the first key that does not fit.
  const std::string job = "task: dit\ninput: '" + kGolden +
                          "dit_t1_h8w12.safetensors'\ndevices: cpu\nmodel: {kind: seedvr2, dit: '" +
                          kVae + "'}\n";
  const CommandResult r = run(dir, job, "out.safetensors");
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(kVae + ": missing key vid_in.proj.weight"), std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("out.safetensors")));
}

TEST(SeedVR2DitJob, ValidationNamesTheKey) {
  TempDir dir;
  // upscale needs the VAE and the text embedding.
  CommandResult r = run(dir, "task: upscale\ninput: x.mp4\n" + dit_model(), "out/{stem}.mp4");
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.output.find("model.vae: required for kind seedvr2 (task upscale)"), std::string::npos)
      << r.output;
  // The official area rule crops: tensors only.
  write_text(dir.file("v.mp4"), "");
  r = run(dir,
          "input: v.mp4\nresolution: [720, 1280]\nmodel: {kind: seedvr2, dit: a.pth, vae: b.pth, "
          "text_embedding: pos_emb.pt}\n",
          "out/{stem}.mp4");
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.output.find("resolution: [height, width] (the official area rule"), std::string::npos)
      << r.output;
  r = run(dir,
          "input: v.mp4\nmodel: {kind: seedvr2, dit: a.pth, vae: b.pth, text_embedding: "
          "pos_emb.pt, batch_frames: 20}\n",
          "out/{stem}.mp4");
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.output.find("model.batch_frames: must be 4n + 1 frames"), std::string::npos)
      << r.output;
  r = run(dir, "input: v.mp4\nresolution: 720\nmodel: {kind: lanczos, scale: 2}\n",
          "out/{stem}.mp4");
  EXPECT_EQ(r.exit_code, 65);
  EXPECT_NE(r.output.find("resolution: applies only to kind seedvr2"), std::string::npos)
      << r.output;
}

// --- the whole upscale ---------------------------------------------------------------------------

// Both golden clips: every float intermediate within 1e-4 of float64, the 8-bit frames within
// one level.
TEST(SeedVR2UpscaleJob, EveryIntermediateOfBothGoldenClips) {
  TempDir dir;
  const std::map<std::string, std::vector<int>> cases = {{"upscale_t5", {48, 52}},
                                                         {"upscale_t7", {40, 64}}};
  // Two jobs of one file (one process).
  std::string jobs;
  for (const auto& [name, res] : cases) {
    jobs += std::string(jobs.empty() ? "" : "---\n") + "job: " + name + "\noutput: " + name +
            "_out.safetensors\non_exists: overwrite\ndebug_tensors: true\n" +
            upscale_job(name, res);
  }
  write_text(dir.file("jobs.yaml"), jobs);
  const CommandResult r = wmbatch({dir.file("jobs.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& [name, res] : cases) {
    const std::string out = dir.file(name + "_out.safetensors");
    const std::string f64 = kGolden + name + ".f64.safetensors";
    for (const char* n :
         {"vae_input", "vae_posterior_mean", "vae_posterior_logvar", "cond_latent", "condition",
          "dit_input", "dit_output", "latent_out", "vae_decode_input", "decoded", "colorfix_out"}) {
      std::vector<int64_t> got_shape, want_shape;
      const std::vector<double> got = values(out, n, &got_shape);
      const std::vector<double> want = values(f64, n, &want_shape);
      EXPECT_EQ(got_shape, want_shape) << name << " " << n;
      const double d = max_diff(got, want);
      EXPECT_LE(d, 1e-4) << name << " " << n;
      RecordProperty(name + "_" + n, std::to_string(d));
    }
    std::vector<int64_t> shape, want_shape;
    const std::vector<double> u8 = values(out, "final_u8", &shape);
    const std::vector<double> want =
        values(kGolden + name + ".safetensors", "final_u8", &want_shape);
    EXPECT_EQ(shape, want_shape);
    EXPECT_LE(max_diff(u8, want), 1.0) << name;
    int off = 0;
    for (size_t i = 0; i < u8.size() && i < want.size(); ++i) off += u8[i] != want[i];
    RecordProperty(name + "_final_u8_values_off_by_one", std::to_string(off));
  }
}

// Without `noise:` the draws come from `seed`: the same job gives the same bits, another seed
// other ones; without debug_tensors the output holds final_u8 alone. The second job reads the
// text embedding from a `torch.save(tensor)` file, as the released pos_emb.pt is.
TEST(SeedVR2UpscaleJob, SeededDrawsAreReproducible) {
  TempDir dir;
  {
    io::SafetensorsFile golden(kGolden + "upscale_t5.safetensors");
    write_bare_tensor_pt(dir.file("pos_emb.pt"), golden.info("text_pos"));
  }
  // Three jobs of one file: seeds 5, 5 (the .pt embedding) and 6.
  std::string jobs;
  for (const auto& [file, seed] : std::vector<std::pair<std::string, int>>{
           {"a.safetensors", 5}, {"b.safetensors", 5}, {"c.safetensors", 6}}) {
    std::string job = upscale_job("upscale_t5", {48, 52}, ", seed: " + std::to_string(seed), false);
    if (file[0] == 'b') {
      const std::string from = kGolden + "upscale_t5.safetensors#text_pos";
      job.replace(job.find(from), from.size(), dir.file("pos_emb.pt"));
    }
    jobs += std::string(jobs.empty() ? "" : "---\n") + "job: " + file.substr(0, 1) +
            "\noutput: " + file + "\non_exists: overwrite\n" + job;
  }
  write_text(dir.file("jobs.yaml"), jobs);
  const CommandResult r = wmbatch({dir.file("jobs.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> a = values(dir.file("a.safetensors"), "final_u8");
  EXPECT_EQ(a, values(dir.file("b.safetensors"), "final_u8"));
  EXPECT_NE(a, values(dir.file("c.safetensors"), "final_u8"));
  io::SafetensorsFile file(dir.file("a.safetensors"));
  EXPECT_EQ(file.names(), std::vector<std::string>{"final_u8"});
}

// --- videos
// ----------------------------------------------------------------------------------------

// The tiny models on a 16×16 clip: ×2, batches of 5 frames overlapping by 2 (new frames 5, 3,
// 3, ...).
std::string video_job(const std::string& extra = "", int overlap = 2, int batch = 5) {
  return "task: upscale\ninput: clip.mkv\nprecision: fp32\ndevices: cpu\n"
         "encode: {codec: ffv1}\n" +
         extra + "model: {kind: seedvr2, dit: '" + kGolden + "weights.safetensors', vae: '" + kVae +
         "', heads: 2, norm_groups: 4, text_embedding: '" + kGolden +
         "upscale_t5.safetensors#text_pos', scale: 2, batch_frames: " + std::to_string(batch) +
         ", batch_overlap: " + std::to_string(overlap) + "}\n";
}

void make_video(const TempDir& dir, int frames, int width = 16, int height = 16) {
  ClipSpec spec;
  spec.width = width, spec.height = height, spec.frames = frames;
  spec.codec = "ffv1";
  spec.pix_fmt = "yuv444p";
  spec.container_ext = ".mkv";
  spec.audio = true;
  spec.audio_codec = "flac";
  make_clip(dir.file("clip.mkv"), spec);
}

// Mean |difference| between consecutive frames t − 1 and t, per t (the first: 0).
std::vector<double> frame_steps(const std::vector<io::VideoFrame>& frames) {
  std::vector<double> out(frames.size(), 0.0);
  for (size_t t = 1; t < frames.size(); ++t) {
    const Planar& a = frames[t - 1].image;
    const Planar& b = frames[t].image;
    double sum = 0;
    for (size_t i = 0; i < a.data.size(); ++i) sum += std::fabs(a.data[i] - b.data[i]);
    out[t] = sum / double(a.data.size());
  }
  return out;
}

bool same_frames(const std::vector<io::VideoFrame>& a, const std::vector<io::VideoFrame>& b) {
  if (a.size() != b.size()) return false;
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].image.data != b[t].image.data || a[t].pts != b[t].pts) return false;
  }
  return true;
}

// Size, frame count, timing and audio of the source; batches cross-faded at their seams; the
// frame-to-frame steps at seams against inside batches, as properties (docs/seedvr2.md).
TEST(SeedVR2VideoJob, UpscalesInOverlappingBatchesAndKeepsAudio) {
  TempDir dir;
  make_video(dir, 8);
  // Overlapping batches [0, 5) and [3, 8), and (second job) batches edge to edge [0, 5), [5, 8).
  write_text(dir.file("jobs.yaml"), "job: blended\noutput: out.mkv\n" + video_job() +
                                        "---\njob: plain\noutput: plain.mkv\n" + video_job("", 0));
  const CommandResult r = wmbatch({dir.file("jobs.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe in = probe(dir.file("clip.mkv"));
  const Probe out = probe(dir.file("out.mkv"));
  EXPECT_EQ(out.width, 32);
  EXPECT_EQ(out.height, 32);
  EXPECT_EQ(out.video_frames, 8);
  EXPECT_EQ(out.video_pts, in.video_pts);
  EXPECT_TRUE(out.has_audio);
  EXPECT_NEAR(out.audio_duration, in.audio_duration, 0.05);

  const auto blended = read_all(dir.file("out.mkv"));
  const auto plain = read_all(dir.file("plain.mkv"));
  ASSERT_EQ(blended.size(), 8u);
  ASSERT_EQ(plain.size(), 8u);
  // Frame-to-frame steps: edge to edge the seam is the step into frame 5; cross-faded, the steps
  // into frames 3, 4 and 5 span the seam (frames 3 and 4 are shared).
  const std::vector<double> sb = frame_steps(blended), sp = frame_steps(plain);
  auto mean = [](const std::vector<double>& v, const std::vector<int>& at) {
    double s = 0;
    for (int t : at) s += v[size_t(t)];
    return s / double(at.size());
  };
  RecordProperty("plain_seam_step", std::to_string(mean(sp, {5})));
  RecordProperty("plain_inside_step", std::to_string(mean(sp, {1, 2, 3, 4, 6, 7})));
  RecordProperty("overlap_seam_step", std::to_string(mean(sb, {3, 4, 5})));
  RecordProperty("overlap_seam_largest_step", std::to_string(std::max({sb[3], sb[4], sb[5]})));
  RecordProperty("overlap_inside_step", std::to_string(mean(sb, {1, 2, 6, 7})));
  // The overlap changes the shared frames and nothing before them.
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(blended[size_t(t)].image.data, plain[size_t(t)].image.data) << t;
  }
  EXPECT_NE(blended[4].image.data, plain[4].image.data);
}

// Batches spread over two CPU ranks (data parallel) give the frames of one rank, and a farm run
// in chunks of whole batches (each after the first starting at a seam) the frames of a whole
// run.
TEST(SeedVR2VideoJob, RanksAndFarmChunksMatchOneRun) {
  TempDir dir;
  make_video(dir, 11);  // batches [0, 5), [3, 8), [6, 11)
  write_text(dir.file("jobs.yaml"), "job: one\noutput: one.mkv\n" + video_job() +
                                        "---\njob: two\noutput: two.mkv\n" +
                                        video_job("parallel: {mode: data, ranks: 2}\n"));
  CommandResult r = wmbatch({dir.file("jobs.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto one = read_all(dir.file("one.mkv"));
  EXPECT_EQ(one.size(), 11u);
  EXPECT_TRUE(same_frames(one, read_all(dir.file("two.mkv"))));

  write_text(dir.file("farm.yaml"), "output: farm.mkv\non_exists: overwrite\n" + video_job());
  // Chunks of 6 frames (two strides of 3): [0, 5] and [6, 10]; the second starts at a seam, runs
  // the batch before it and writes from frame 6.
  r = run_command(
      {wmbatch_path(), "run", dir.file("farm.yaml"), "--chunk-frames", "6", "--progress", "none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(same_frames(one, read_all(dir.file("farm.mkv"))));
  r = run_command({wmbatch_path(), "plan", dir.file("farm.yaml"), "--chunk-frames", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"context_before\": 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"context_after\": 2"), std::string::npos) << r.output;
  // A chunk must start at a seam.
  r = run_command(
      {wmbatch_path(), "run", dir.file("farm.yaml"), "--frames", "4-8", "--progress", "none"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("is not a chunk boundary"), std::string::npos) << r.output;
}

// Each batch of one video split over two CPU ranks inside (parallel: sequence; runs of latent
// frames through the VAE, whole windows through the DiT) gives the frames of one rank. Batches of
// 9 frames with an overlap of 2 over 16 frames of 96 × 64: 3 latent frames and 3 × 8 × 12 DiT
// tokens each, so both ranks take part in both batches.
TEST(SeedVR2VideoJob, SequenceParallelRanksMatchOneRun) {
  TempDir dir;
  make_video(dir, 16, 96, 64);
  write_text(dir.file("jobs.yaml"), "job: one\noutput: one.mkv\n" + video_job("", 2, 9) +
                                        "---\njob: split\noutput: split.mkv\n" +
                                        video_job("parallel: {mode: sequence, ranks: 2}\n", 2, 9));
  const CommandResult r = wmbatch({dir.file("jobs.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto one = read_all(dir.file("one.mkv"));
  ASSERT_EQ(one.size(), 16u);
  EXPECT_EQ(one[0].image.width, 192);
  EXPECT_TRUE(same_frames(one, read_all(dir.file("split.mkv"))));
  EXPECT_TRUE(probe(dir.file("split.mkv")).has_audio);
}

// `wmbench seedvr2-upscale` at the golden data's sizes on the CPU: every stage timed, the JSON
// complete (the GPU numbers come from tools/gpu-checks/dit.sh).
TEST(SeedVR2Bench, TinyCpuRunReportsEveryStage) {
  const std::string wmbench = std::string(WM_BINARY_DIR) + "/wmbench";
  if (!exists(wmbench)) GTEST_FAIL() << wmbench << " is not built";
  const CommandResult r = run_command({wmbench, "seedvr2-upscale", "--model", "tiny", "--device",
                                       "cpu", "--dtype", "fp32", "--frames", "5", "--height", "32",
                                       "--width", "48", "--warmup", "0", "--iters", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  ASSERT_NE(brace, std::string::npos) << r.output;
  const nlohmann::json j =
      nlohmann::json::parse(r.output.substr(brace, r.output.find('\n', brace) - brace));
  for (const char* key : {"resize_seconds", "encode_seconds", "dit_seconds", "decode_seconds",
                          "color_fix_seconds", "seconds", "fps"}) {
    ASSERT_TRUE(j.contains(key)) << key << " in " << r.output;
    EXPECT_GT(j.at(key).get<double>(), 0.0) << key;
  }
  EXPECT_LE(j.at("encode_seconds").get<double>() + j.at("dit_seconds").get<double>() +
                j.at("decode_seconds").get<double>(),
            j.at("seconds").get<double>());
  EXPECT_EQ(j.at("network_height").get<int>(), 32);
  EXPECT_EQ(j.at("dit_blocks").get<int>(), 4);
}

// The same over two CPU ranks (--devices cpu --ranks 2): the batch split inside over the ranks
// and a batch per rank, each against one device's frames (bit for bit on CPU ranks) — the JSON
// issue 30's multi-GPU rows are read from.
TEST(SeedVR2Bench, TwoCpuRanksSplitAndDataRunsEqualOneDevice) {
  const std::string wmbench = std::string(WM_BINARY_DIR) + "/wmbench";
  if (!exists(wmbench)) GTEST_FAIL() << wmbench << " is not built";
  const CommandResult r = run_command({wmbench,     "seedvr2-upscale",
                                       "--model",   "tiny",
                                       "--device",  "cpu",
                                       "--dtype",   "fp32",
                                       "--frames",  "5",
                                       "--height",  "96",
                                       "--width",   "160",
                                       "--warmup",  "0",
                                       "--iters",   "1",
                                       "--devices", "cpu",
                                       "--ranks",   "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  ASSERT_NE(brace, std::string::npos) << r.output;
  const nlohmann::json j =
      nlohmann::json::parse(r.output.substr(brace, r.output.find('\n', brace) - brace));
  EXPECT_GT(j.at("one_device_seconds").get<double>(), 0.0);
  for (const char* run : {"sequence_parallel", "data_parallel"}) {
    ASSERT_TRUE(j.contains(run)) << run << " in " << r.output;
    const nlohmann::json& p = j.at(run);
    EXPECT_EQ(p.at("ranks").get<int>(), 2) << run;
    EXPECT_GT(p.at("fps").get<double>(), 0.0) << run;
    EXPECT_EQ(p.at("max_diff_levels").get<double>(), 0.0) << run;
  }
}

}  // namespace
}  // namespace wm::test
