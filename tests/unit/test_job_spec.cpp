// Job files: parsing, defaults, every class of validation error (line and key), multi-document
// files, output templates, input globs, and the example jobs in jobs/.
#include "src/job_spec.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/registry.h"
#include "src/models/torchscript.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/yaml_load.h"

namespace wm {
namespace {

namespace fs = std::filesystem;

const char* const kFile = "jobs/t.yaml";

std::vector<JobSpec> parse(const std::string& yaml) { return parse_job_text(yaml, kFile); }

JobSpec parse_one(const std::string& yaml) {
  auto jobs = parse(yaml);
  EXPECT_EQ(jobs.size(), 1u);
  return jobs.at(0);
}

std::string cwd_path(const std::string& relative) {
  return (fs::current_path() / relative).lexically_normal().string();
}

// A fresh folder, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "wm_job_spec_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string touch(const std::string& relative, const std::string& text = "") const {
    const fs::path p = fs::path(path_) / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::string path_;
};

TEST(JobSpec, FullJobFillsEveryField) {
  const std::string yaml = R"(job: archive-decode
task: decode_latents
input:
  - latents/*.safetensors
  - extra/one.safetensors
output: out/{job}/{stem}.mkv
on_exists: overwrite
model:
  kind: wan2.1-vae
  weights: ../models/vae.safetensors
  dim: 16
  z_dim: 4
  dim_mult: [1, 2, 2]
  num_res_blocks: 1
  temporal_downsample: [false, true]
  latent_mean: [0.5, -0.25, 0, 1]
  latent_std: [1, 2, 0.5, 3]
precision: bf16
devices: [1, 0]
tiling: {tile_width: 64, tile_height: 32, overlap: 8}
slice_frames: 4
tokens: 2
offload: {pinned_mib: 64}
encode:
  codec: libx265
  crf: 20
  preset: slow
  pix_fmt: yuv420p10le
  audio: none
  subtitles: none
  threads: 4
  options: {x265-params: 'keyint=48:min-keyint=48', tune: grain}
fps: 23.976
input_tensor: z
max_error_rate: 0.01
)";
  const JobSpec j = parse_one(yaml);
  EXPECT_EQ(j.file, kFile);
  EXPECT_EQ(j.dir, cwd_path("jobs"));
  EXPECT_EQ(j.line, 1);
  EXPECT_EQ(j.name, "archive-decode");
  EXPECT_EQ(j.task, Task::kDecodeLatents);
  EXPECT_EQ(j.inputs, (std::vector<std::string>{"latents/*.safetensors", "extra/one.safetensors"}));
  EXPECT_EQ(j.input_lines, (std::vector<int>{4, 5}));
  EXPECT_EQ(j.output, "out/{job}/{stem}.mkv");
  EXPECT_EQ(j.on_exists, OnExists::kOverwrite);
  EXPECT_EQ(j.model.kind, "wan2.1-vae");
  EXPECT_EQ(j.model.task, "decode");
  EXPECT_EQ(j.model.weights, cwd_path("models/vae.safetensors"));
  EXPECT_EQ(j.model.precision, Precision::kBFloat16);
  const auto* wan = dynamic_cast<const models::Wan21VaeOptions*>(j.model.options.get());
  ASSERT_NE(wan, nullptr);
  EXPECT_EQ(wan->dim, 16);
  EXPECT_EQ(wan->z_dim, 4);
  EXPECT_EQ(wan->dim_mult, (std::vector<int>{1, 2, 2}));
  EXPECT_EQ(wan->num_res_blocks, 1);
  EXPECT_EQ(wan->temporal_downsample, (std::vector<bool>{false, true}));
  EXPECT_EQ(wan->latent_mean, (std::vector<double>{0.5, -0.25, 0, 1}));
  EXPECT_EQ(wan->latent_std, (std::vector<double>{1, 2, 0.5, 3}));
  EXPECT_EQ(j.devices, "list");
  EXPECT_EQ(j.device_ids, (std::vector<int>{1, 0}));
  EXPECT_TRUE(j.tiling.enabled);
  EXPECT_FALSE(j.tiling.automatic);
  EXPECT_EQ(j.tiling.tile_width, 64);
  EXPECT_EQ(j.tiling.tile_height, 32);
  EXPECT_EQ(j.tiling.overlap, 8);
  EXPECT_EQ(j.slice_frames, 4);
  EXPECT_EQ(j.tokens, 2);
  EXPECT_EQ(j.model.pinned_pool_bytes, int64_t(64) << 20);
  EXPECT_EQ(j.encode.codec, "libx265");
  EXPECT_EQ(j.encode.crf, 20);
  EXPECT_EQ(j.encode.preset, "slow");
  EXPECT_EQ(j.encode.pix_fmt, "yuv420p10le");
  EXPECT_FALSE(j.encode.copy_audio);
  EXPECT_FALSE(j.encode.copy_subtitles);
  EXPECT_EQ(j.encode.threads, 4);
  EXPECT_EQ(j.encode.options, (std::vector<std::pair<std::string, std::string>>{
                                  {"x265-params", "keyint=48:min-keyint=48"}, {"tune", "grain"}}));
  EXPECT_DOUBLE_EQ(j.fps, 23.976);
  EXPECT_EQ(j.input_tensor, "z");
  EXPECT_DOUBLE_EQ(j.max_error_rate, 0.01);
}

TEST(JobSpec, UpscaleKeysAndScalarForms) {
  const JobSpec j = parse_one(
      "input: clips/a.mp4\noutput: /abs/{stem}_x3{ext}\nmodel: {kind: bicubic, scale: 3}\n"
      "devices: auto\ntiling: {tile: 256, overlap: 16}\n");
  EXPECT_EQ(j.inputs, std::vector<std::string>{"clips/a.mp4"});
  EXPECT_EQ(j.input_lines, std::vector<int>{1});
  EXPECT_EQ(j.model.kind, "bicubic");
  EXPECT_EQ(j.model.scale, 3);
  EXPECT_EQ(j.model.task, "upscale");
  EXPECT_EQ(j.devices, "auto");
  EXPECT_TRUE(j.device_ids.empty());
  EXPECT_EQ(j.tiling.tile_width, 256);
  EXPECT_EQ(j.tiling.tile_height, 256);
  EXPECT_EQ(j.tiling.overlap, 16);

  const JobSpec automatic = parse_one("input: a.mp4\noutput: o/{stem}.mp4\ntiling: auto\n");
  EXPECT_TRUE(automatic.tiling.enabled);
  EXPECT_TRUE(automatic.tiling.automatic);
  const JobSpec none = parse_one("input: a.mp4\noutput: o/{stem}.mp4\ntiling: none\n");
  EXPECT_FALSE(none.tiling.enabled);
}

TEST(JobSpec, DecodeModes) {
  const std::string job = "input: a.mp4\noutput: o/{stem}.mp4\n";
  EXPECT_EQ(parse_one(job).decode, DecodeMode::kSoftware);
  EXPECT_EQ(parse_one(job + "decode: software\n").decode, DecodeMode::kSoftware);
  EXPECT_EQ(parse_one(job + "decode: nvdec\n").decode, DecodeMode::kNvdec);
  EXPECT_EQ(parse_one(job + "decode: auto\ndevices: [0]\n").decode, DecodeMode::kAuto);
  EXPECT_EQ(parse_one("task: reconstruct\ninput: a.mp4\noutput: o/{stem}.mp4\n"
                      "model: {kind: wan2.1-vae, weights: w.safetensors}\ndecode: nvdec\n")
                .decode,
            DecodeMode::kNvdec);
}

TEST(JobSpec, Defaults) {
  const JobSpec j = parse_one("input: a.mp4\noutput: out/{stem}.mp4\n");
  EXPECT_EQ(j.name, "t");  // the file's stem
  EXPECT_EQ(j.task, Task::kUpscale);
  EXPECT_EQ(j.on_exists, OnExists::kFail);
  EXPECT_EQ(j.model.kind, "lanczos");
  EXPECT_EQ(j.model.scale, 2);
  EXPECT_EQ(j.model.task, "upscale");
  EXPECT_EQ(j.model.precision, Precision::kFloat32);
  EXPECT_TRUE(j.model.weights.empty());
  EXPECT_EQ(j.devices, "cpu");
  EXPECT_FALSE(j.tiling.enabled);
  EXPECT_EQ(j.slice_frames, 0);  // auto
  EXPECT_EQ(j.tokens, 3);
  EXPECT_EQ(j.model.pinned_pool_bytes, 0);
  EXPECT_EQ(j.encode.codec, "libx264");
  EXPECT_EQ(j.encode.crf, 18);
  EXPECT_EQ(j.encode.preset, "medium");
  EXPECT_TRUE(j.encode.pix_fmt.empty());
  EXPECT_TRUE(j.encode.copy_audio);
  EXPECT_TRUE(j.encode.copy_subtitles);
  EXPECT_EQ(j.fps, 0);
  EXPECT_EQ(j.input_tensor, "input");  // upscale's tensor inputs
  EXPECT_EQ(j.max_error_rate, 0);
}

TEST(JobSpec, RegistryKindsValidateTheirOwnOptions) {
  const JobSpec r = parse_one(
      "input: a.safetensors\noutput: o/{stem}.safetensors\n"
      "model: {kind: realesrgan, weights: m/x4.pth, scale: 2}\ntiling: {tile: 64, exact: true}\n");
  EXPECT_EQ(r.model.kind, "realesrgan");
  const auto* options = dynamic_cast<const models::RealEsrganOptions*>(r.model.options.get());
  ASSERT_NE(options, nullptr);
  EXPECT_EQ(options->scale, 2);
  EXPECT_TRUE(r.model.exact_tiles);
  EXPECT_TRUE(r.tiling.exact);
  EXPECT_EQ(r.input_tensor, "input");

  const JobSpec t = parse_one(
      "input: a.mp4\noutput: o/{stem}.mp4\nmodel: {kind: torchscript, weights: m.pt, halo: 8}\n");
  const auto* scripted = dynamic_cast<const models::ScriptedOptions*>(t.model.options.get());
  ASSERT_NE(scripted, nullptr);
  EXPECT_EQ(scripted->halo, 8);
  EXPECT_EQ(scripted->scale, 0);  // from the probe

  // Every kind the registry lists validates with its required keys, or names why it cannot run.
  for (const ModelKind& kind : model_kinds()) {
    const bool upscale = kind.tasks.front() == "upscale";
    std::string yaml = upscale
                           ? "input: a.mp4\noutput: o/{stem}.mp4\n"
                           : "task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n";
    yaml += "model: {kind: " + kind.name;
    if (kind.name == "seedvr2") yaml += ", dit: d.pth, vae: v.pth, text_embedding: pos_emb.pt";
    if (std::find(kind.options.begin(), kind.options.end(), "weights") != kind.options.end()) {
      yaml += ", weights: " + std::string(kind.name == "realesrgan" || kind.name == "wan2.1-vae" ||
                                                  kind.name == "seedvr2-vae"
                                              ? "m.safetensors"
                                          : kind.name == "aoti" ? "m.pt2"
                                                                : "m.pt");
    }
    yaml += "}\n";
    if (kind.unavailable.empty()) {
      EXPECT_EQ(parse_one(yaml).model.kind, kind.name);
    } else {
      try {
        parse_one(yaml);
        ADD_FAILURE() << kind.name << " validated but cannot run";
      } catch (const ConfigError& e) {
        EXPECT_EQ(e.key(), "model.kind");
        EXPECT_NE(std::string(e.what()).find(kind.unavailable), std::string::npos);
      }
    }
  }
}

TEST(JobSpec, ModelTaskFollowsJobTask) {
  const std::string vae = "model: {kind: wan2.1-vae, weights: w.safetensors}\n";
  EXPECT_EQ(parse_one("task: encode_latents\ninput: a.mp4\noutput: o/{stem}.safetensors\n" + vae)
                .model.task,
            "encode");
  EXPECT_EQ(parse_one("task: reconstruct\ninput: a.mp4\noutput: o/{stem}.mp4\n" + vae).model.task,
            "encode");
  const JobSpec ts = parse_one(
      "input: a.mp4\noutput: o/{stem}.mp4\nmodel: {kind: torchscript, weights: /m/sr.pt}\n");
  EXPECT_EQ(ts.model.kind, "torchscript");
  EXPECT_EQ(ts.model.weights, "/m/sr.pt");
}

struct BadJob {
  const char* yaml;
  int line;
  const char* key;      // the ConfigError's key
  const char* problem;  // a piece of what()
};

// Prints the YAML of a failing case.
void PrintTo(const BadJob& c, std::ostream* os) { *os << c.yaml; }

class JobSpecErrors : public testing::TestWithParam<BadJob> {};

TEST_P(JobSpecErrors, ReportLineAndKey) {
  const BadJob& c = GetParam();
  try {
    parse(c.yaml);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.line(), c.line) << e.what();
    EXPECT_EQ(e.key(), c.key) << e.what();
    EXPECT_EQ(e.file(), kFile);
    EXPECT_EQ(e.exit_code(), kExitDataErr);
    const std::string what = e.what();
    EXPECT_NE(what.find(c.problem), std::string::npos) << what;
    EXPECT_EQ(what.rfind(std::string(kFile) + ":" + std::to_string(c.line) + ": ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

#define JOB "input: a.mp4\noutput: o/{stem}.mp4\n"  // lines 1-2 of most cases
#define VAE "model: {kind: wan2.1-vae, weights: w.safetensors}\n"

const BadJob kBadJobs[] = {
    // unknown keys, with suggestions
    {JOB "outptu: x\n", 3, "outptu", "unknown key (did you mean `output`?)"},
    {JOB "tiling:\n  tile: 512\n  overlapp: 16\n", 5, "tiling.overlapp", "did you mean `overlap`?"},
    {JOB "overlap: 16\n", 3, "overlap", "did you mean `tiling.overlap`?"},
    {JOB "model:\n  kind: lanczos\n  precision: bf16\n", 5, "model.precision",
     "did you mean top-level `precision`?"},
    {JOB "colour: red\n", 3, "colour", "unknown key (known keys: job, task"},
    {JOB "tokens: 2\ntokens: 3\n", 4, "tokens", "repeated key (first at line 3)"},
    // wrong types
    {JOB "tokens: [1]\n", 3, "tokens", "must be an integer (got a list)"},
    {JOB "slice_frames: \"8\"\n", 3, "slice_frames", "must be an integer (got the string '8')"},
    {JOB "slice_frames: 2.5\n", 3, "slice_frames", "must be an integer (got '2.5')"},
    {JOB "encode:\n  crf:\n", 4, "encode.crf", "must be an integer (got nothing)"},
    {JOB "max_error_rate: lots\n", 3, "max_error_rate", "must be a number"},
    {JOB "model: lanczos\n", 3, "model", "must be a map of keys (got 'lanczos')"},
    {JOB "encode: [libx264]\n", 3, "encode", "must be a map of keys (got a list)"},
    {"input: {a: 1}\noutput: o/{stem}.mp4\n", 1, "input", "must be a file, a glob or a list"},
    {"input:\n  - a.mp4\n  - [b.mp4]\noutput: o/{stem}.mp4\n", 3, "input[1]", "must be a string"},
    {"- input: a.mp4\n", 1, "", "a job must be a map of keys (got a list)"},
    // missing or empty
    {"output: o/{stem}.mp4\n", 1, "input", "required"},
    {"task: upscale\ninput: a.mp4\n", 1, "output", "required"},
    {"input: []\noutput: o/{stem}.mp4\n", 1, "input", "must not be empty"},
    {"input: ''\noutput: o/{stem}.mp4\n", 1, "input", "must not be empty"},
    // bad values
    {JOB "on_exists: skp\n", 3, "on_exists",
     "must be fail, skip or overwrite (got 'skp'; did you mean `skip`?)"},
    {JOB "task: upscal\n", 3, "task", "did you mean `upscale`?"},
    {JOB "job: a/b\n", 3, "job", "must not contain '/'"},
    {JOB "model:\n  kind: lanczos\n  scale: 5\n", 5, "model.scale", "must be 2, 3 or 4 (got 5)"},
    {JOB "model: {kind: bicubic, scale: 1}\n", 3, "model.scale", "must be 2, 3 or 4 (got 1)"},
    {JOB "encode:\n  codec: libx264\n  crf: 52\n", 5, "encode.crf", "must be at most 51 (got 52)"},
    {JOB "encode: {crf: -1}\n", 3, "encode.crf", "must be at least 0 (got -1)"},
    {JOB "encode: {preset: medum}\n", 3, "encode.preset", "did you mean `medium`?"},
    {JOB "encode: {audio: keep}\n", 3, "encode.audio", "must be copy or none (got 'keep')"},
    {JOB "encode: {subtitles: yes}\n", 3, "encode.subtitles", "must be copy or none"},
    {JOB "encode: {threads: -2}\n", 3, "encode.threads", "must be at least 0"},
    {JOB "encode: {pix_fmt: 'yuv 420'}\n", 3, "encode.pix_fmt", "must be a libav name"},
    {JOB "offload: {pinned_mib: 0}\n", 3, "offload.pinned_mib", "must be at least 1 (got 0)"},
    {JOB "offload: {pinned: 64}\n", 3, "offload.pinned", "unknown key (known keys: pinned_mib)"},
    {JOB "offload: 64\n", 3, "offload", "must be a map of keys"},
    {JOB "encode: {options: [tune]}\n", 3, "encode.options", "must be a map of encoder options"},
    {JOB "encode:\n  options:\n    'a b': 1\n", 5, "encode.options", "keys must be libav option"},
    {JOB "encode:\n  options:\n    g: [1]\n", 5, "encode.options.g", "must be a scalar"},
    {JOB "encode:\n  options:\n    g: 1\n    g: 2\n", 6, "encode.options.g", "repeated key"},
    {JOB "tiling:\n  tile: 0\n", 4, "tiling.tile", "must be at least 1 (got 0)"},
    {JOB "tiling: {tile: -512}\n", 3, "tiling.tile", "must be at least 1 (got -512)"},
    {JOB "tiling: {tile_width: 0, tile_height: 64}\n", 3, "tiling.tile_width", "at least 1"},
    {JOB "tiling:\n  tile: 64\n  overlap: 64\n", 5, "tiling.overlap",
     "must be less than the tile size 64 (got 64)"},
    {JOB "tiling: {tile_width: 128, tile_height: 32, overlap: 40}\n", 3, "tiling.overlap",
     "less than the tile size 32"},
    {JOB "tiling: {tile: 64, tile_width: 64}\n", 3, "tiling.tile_width", "either tile or"},
    {JOB "tiling:\n  tile_width: 64\n", 3, "tiling.tile_height", "required with"},
    {JOB "tiling:\n  overlap: 8\n", 3, "tiling.tile", "required"},
    {JOB "tiling: 512\n", 3, "tiling", "must be none, auto or a map"},
    {JOB "tiling: {tile: 64, overlap: -1}\n", 3, "tiling.overlap", "at least 0"},
    {JOB "slice_frames: -1\n", 3, "slice_frames", "must be at least 0 (got -1)"},
    {JOB "tokens: 0\n", 3, "tokens", "must be at least 1 (got 0)"},
    {JOB "max_error_rate: 1.5\n", 3, "max_error_rate", "must be at most 1 (got 1.5)"},
    {JOB "max_error_rate: -0.1\n", 3, "max_error_rate", "must be at least 0"},
    // models
    {JOB "model: {kind: realesrgan, weights: m.pt}\n", 3, "model.weights",
     "must be a .pth or .safetensors file"},
    {JOB "model: {kind: realesrgan}\n", 3, "model.weights", "required for kind realesrgan"},
    {JOB "model: {kind: realesrgan, weights: m.pth, scale: 9}\n", 3, "model.scale",
     "must be at most 8"},
    {JOB "model: {kind: realesrgan, weights: m.pth, halo: 4}\n", 3, "model.halo",
     "applies only to kind torchscript or aoti"},
    {JOB "tiling: {tile: 64, exact: 3}\n", 3, "tiling.exact", "must be true or false"},
    {JOB "model: {kind: realesrgan, weights: m.pth}\nprecision: fp16\n", 4, "precision",
     "kind realesrgan runs fp16 on GPUs only; on devices: cpu use fp32"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n" VAE "precision: fp16\n",
     5, "precision", "on devices: cpu use fp32 or bf16"},
    {JOB "model:\n  kind: esrgan\n", 4, "model.kind",
     "must be lanczos, bicubic, realesrgan, torchscript, aoti, wan2.1-vae, seedvr2-vae or seedvr2 "
     "(got 'esrgan')"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model: {kind: wan21-vae}\n",
     4, "model.kind", "did you mean `wan2.1-vae`?"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\nmodel:\n"
     "  kind: wan2.1-vae\n",
     4, "model.weights", "required for kind wan2.1-vae"},
    {JOB "model:\n  kind: torchscript\n", 3, "model.weights", "required for kind torchscript"},
    {JOB "model: {kind: lanczos, weights: w.pt}\n", 3, "model.weights",
     "applies only to kind realesrgan, torchscript, aoti, wan2.1-vae or seedvr2-vae"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model: {kind: wan2.1-vae, weights: vae.pth}\n",
     4, "model.weights", "must be a .safetensors file"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\nmodel:\n  kind: lanczos\n",
     5, "model.kind", "task decode_latents needs kind wan2.1-vae or seedvr2-vae (got lanczos)"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model: {kind: wan2.1-vae, weights: w.safetensors, norm_groups: 4}\n",
     4, "model.norm_groups", "applies only to kind seedvr2-vae"},
    {"task: encode_latents\ninput: a.mp4\noutput: o/{stem}.safetensors\nslice_frames: 6\n"
     "model: {kind: seedvr2-vae, weights: w.safetensors}\n",
     4, "slice_frames", "must be a multiple of 4 for seedvr2-vae encoding (got 6)"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n", 1, "model",
     "required for task decode_latents"},
    {JOB VAE, 3, "model.kind",
     "task upscale needs kind lanczos, bicubic, realesrgan, torchscript, aoti or seedvr2"},
    {"task: reconstruct\ninput: a.mp4\noutput: o/{stem}.mp4\n"
     "model: {kind: torchscript, weights: m.pt}\n",
     4, "model.kind", "needs kind wan2.1-vae"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\nmodel:\n"
     "  kind: wan2.1-vae\n  weights: w.safetensors\n  scale: 2\n",
     7, "model.scale",
     "applies only to kind lanczos, bicubic, realesrgan, torchscript, aoti or seedvr2"},
    {JOB "model:\n  kind: lanczos\n  dim: 96\n", 5, "model.dim", "applies only to kind wan2.1-vae"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  latent_std: [1, 1, 1, 1, 1, 1, 1, "
     "1,\n"
     "    1, 1, 1, 1, 1, 1, 1, 0]\n",
     8, "model.latent_std[15]", "must be greater than 0 (got 0)"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  latent_mean: [0, 1]\n",
     7, "model.latent_mean", "needs z_dim = 16 numbers (got 2)"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  z_dim: 8\n",
     7, "model.z_dim", "give both"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  temporal_downsample: [true, yes]\n",
     7, "model.temporal_downsample", "needs 3 entries"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  temporal_downsample: [true, 2, no]\n",
     7, "model.temporal_downsample[1]", "must be true or false (got '2')"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  dim_mult: [1, 2]\n",
     7, "model.dim_mult", "model.temporal_downsample needs 1 entries"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n"
     "model:\n  kind: wan2.1-vae\n  weights: w.safetensors\n  dim_mult: [1, 0, 4, 4]\n",
     7, "model.dim_mult[1]", "must be at least 1"},
    {"task: encode_latents\ninput: a.mp4\noutput: o/{stem}.safetensors\n" VAE
     "tiling: {tile: 100}\n",
     5, "tiling.tile", "must be a multiple of 8 for wan2.1-vae encoding (got 100)"},
    {JOB "precision: fp64\n", 3, "precision", "must be fp32, bf16 or fp16 (got 'fp64')"},
    // the built-in resamplers compute in fp32 everywhere (issue 25: bf16 was ignored silently)
    {JOB "precision: bf16\n", 3, "precision", "kind lanczos runs fp32 only, not bf16"},
    {JOB "model: {kind: bicubic}\ndevices: auto\nprecision: fp16\n", 5, "precision",
     "kind bicubic runs fp32 only, not fp16 (leave precision out)"},
    // decode
    {JOB "decode: nvdc\n", 3, "decode",
     "must be software, nvdec or auto (got 'nvdc'; did you mean `nvdec`?)"},
    {JOB "decode: cuda\n", 3, "decode", "must be software, nvdec or auto (got 'cuda')"},
    {JOB "decode: [nvdec]\n", 3, "decode", "must be software, nvdec or auto (got a list)"},
    {JOB "tokens: 2\ndecod: nvdec\n", 4, "decod", "unknown key (did you mean `decode`?)"},
    {JOB "encode:\n  decode: nvdec\n", 4, "encode.decode", "did you mean top-level `decode`?"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n" VAE "decode: nvdec\n", 5,
     "decode",
     "applies only to task upscale, encode_latents or reconstruct (task is decode_latents)"},
    // devices
    {JOB "devices: gpu\n", 3, "devices", "must be cpu, auto or a list of GPU indices"},
    {JOB "devices: 0\n", 3, "devices", "like [0, 1]"},
    {JOB "devices: []\n", 3, "devices", "must not be empty"},
    {JOB "devices:\n  - 0\n  - -1\n", 5, "devices[1]", "must be at least 0 (got -1)"},
    {JOB "devices: [0, cuda]\n", 3, "devices[1]", "must be an integer (got 'cuda')"},
    {JOB "devices: [1, 1]\n", 3, "devices[1]", "GPU 1 is listed twice"},
    // outputs
    {"input: a.mp4\noutput: o/{name}.mp4\n", 2, "output", "unknown placeholder {name}"},
    {"input: a.mp4\noutput: 'o/{stem.mp4'\n", 2, "output", "unmatched '{'"},
    {"input: a.mp4\noutput: o/stem}.mp4\n", 2, "output", "unmatched '}'"},
    {"input: a.mp4\noutput: out/{dir}/{stem}.mp4\n", 2, "output", "{dir} may only start"},
    {"input: a.mp4\noutput: a.mp4\n", 2, "output", "would overwrite input 'a.mp4' (line 1)"},
    {"input: clips/*.mp4\noutput: '{dir}/{stem}{ext}'\n", 2, "output",
     "would overwrite input 'clips/*.mp4'"},
    {"input: clips/*.mp4\noutput: clips/{stem}_x2.mp4\n", 2, "output",
     "outputs would match input 'clips/*.mp4'"},
    {"input: [a.mp4, b.mp4]\noutput: out.mp4\n", 2, "output", "must contain {stem}"},
    {"input: a.mp4\noutput: out/{stem}\n", 2, "output", "needs a file extension"},
    {"task: encode_latents\ninput: a.mp4\noutput: o/{stem}.mp4\n" VAE, 3, "output",
     "must end with .safetensors"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}{ext}\n" VAE, 3, "output",
     "must name a video file"},
    // keys for other tasks
    {JOB "fps: 24\n", 3, "fps", "applies only to task decode_latents (task is upscale)"},
    {"task: decode_latents\ninput: a.safetensors\noutput: o/{stem}.mp4\n" VAE "fps: 0\n", 5, "fps",
     "must be greater than 0 (got 0)"},
    {"task: reconstruct\ninput: a.mp4\noutput: o/{stem}.mp4\n" VAE "input_tensor: x\n", 5,
     "input_tensor", "applies only to task decode_latents, encode_latents or upscale"},
    {"task: encode_latents\ninput: a.mp4\noutput: o/{stem}.safetensors\n" VAE "encode: {crf: 1}\n",
     5, "encode", "applies only to tasks that write video"},
    // YAML syntax, documents
    {"input: [a.mp4,\noutput: x\n  bad: 1\n", 3, "", "invalid YAML"},
    {JOB "---\njob: t\n" JOB "---\njob: t\n" JOB, 8, "job",
     "job name 't' is also used by the job at line 4"},
    {"# only a comment\n", 1, "", "no job in file"},
};

INSTANTIATE_TEST_SUITE_P(Table, JobSpecErrors, testing::ValuesIn(kBadJobs));

// One reading of numbers, integers and flags for job files and WATCH.yaml (issue 27).
TEST(YamlScalars, OneReadingForJobFilesAndWatchYaml) {
  auto number = [](const char* text) { return yaml_number(YAML::Load(text)); };
  auto integer = [](const char* text) { return yaml_integer(YAML::Load(text)); };
  auto flag = [](const char* text) { return yaml_flag(YAML::Load(text)); };
  EXPECT_EQ(number("2"), 2.0);
  EXPECT_EQ(number("0.5"), 0.5);
  EXPECT_EQ(number("1e3"), 1000.0);
  EXPECT_EQ(number("-4"), -4.0);
  for (const char* bad :
       {"nan", "inf", "-.inf", "1 s", "0x10", "''", "! 2", "[2]", "{a: 1}", "~"}) {
    EXPECT_FALSE(number(bad)) << bad;
  }
  EXPECT_EQ(integer("12"), 12);
  EXPECT_EQ(integer("-3"), -3);
  for (const char* bad : {"1.0", "1e3", "+", "''", "12a", "! 7", "99999999999999999999"}) {
    EXPECT_FALSE(integer(bad)) << bad;
  }
  EXPECT_EQ(flag("yes"), true);
  EXPECT_EQ(flag("Off"), false);
  for (const char* bad : {"1", "maybe", "! true", "[true]"}) EXPECT_FALSE(flag(bad)) << bad;
}

TEST(JobSpec, MultiDocumentFile) {
  const auto jobs = parse(
      "input: a.mp4\noutput: o/{stem}.mp4\n"
      "---\n"
      "---\n"  // an empty document is not a job
      "job: second\n"
      "input: b.mp4\noutput: o/{stem}.mp4\n"
      "---\n"
      "input: c.mp4\noutput: o/{stem}.mp4\n");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].name, "t-1");
  EXPECT_EQ(jobs[1].name, "second");
  EXPECT_EQ(jobs[2].name, "t-3");
  EXPECT_EQ(jobs[0].line, 1);
  EXPECT_EQ(jobs[1].line, 5);
  EXPECT_EQ(jobs[2].line, 9);
  EXPECT_EQ(jobs[2].inputs, std::vector<std::string>{"c.mp4"});
  EXPECT_EQ(jobs[1].input_lines, std::vector<int>{6});
}

TEST(JobSpec, ToString) {
  EXPECT_STREQ(to_string(Task::kUpscale), "upscale");
  EXPECT_STREQ(to_string(Task::kDecodeLatents), "decode_latents");
  EXPECT_STREQ(to_string(Task::kEncodeLatents), "encode_latents");
  EXPECT_STREQ(to_string(Task::kReconstruct), "reconstruct");
  EXPECT_STREQ(to_string(OnExists::kFail), "fail");
  EXPECT_STREQ(to_string(OnExists::kSkip), "skip");
  EXPECT_STREQ(to_string(OnExists::kOverwrite), "overwrite");
  EXPECT_STREQ(to_string(Precision::kFloat32), "fp32");
  EXPECT_STREQ(to_string(Precision::kBFloat16), "bf16");
  EXPECT_STREQ(to_string(Precision::kFloat16), "fp16");
  EXPECT_STREQ(to_string(DecodeMode::kSoftware), "software");
  EXPECT_STREQ(to_string(DecodeMode::kNvdec), "nvdec");
  EXPECT_STREQ(to_string(DecodeMode::kAuto), "auto");
}

TEST(ExpandOutput, Placeholders) {
  EXPECT_EQ(expand_output("out/{stem}_x2{ext}", "/data/clips/a.b.mp4", "j", "/jobs"),
            "/jobs/out/a.b_x2.mp4");
  EXPECT_EQ(expand_output("out/{job}/{stem}.mkv", "/data/a.mov", "night", "/jobs"),
            "/jobs/out/night/a.mkv");
  EXPECT_EQ(expand_output("{dir}/x2/{stem}{ext}", "/data/clips/a.mp4", "j", "/jobs"),
            "/data/clips/x2/a.mp4");
  EXPECT_EQ(expand_output("/abs/{{{stem}}}.mp4", "/data/a.mp4", "j", "/jobs"), "/abs/{a}.mp4");
  EXPECT_EQ(expand_output("../out/{stem}{ext}", "/data/noext", "j", "/jobs/x"), "/jobs/out/noext");
  // A relative input is taken relative to the job's folder.
  EXPECT_EQ(expand_output("{dir}/o/{stem}.mp4", "clips/a.mp4", "j", "/jobs"),
            "/jobs/clips/o/a.mp4");
}

// A '%' in the name of a file that exists is part of its name (issue 25: "50%discount.mp4" once
// had {stem} "50iscount"); a path no file has is an image sequence's pattern.
TEST(ExpandOutput, APercentInARealFileNameIsKept) {
  TempDir tmp;
  tmp.touch("50%discount.mp4");
  tmp.touch("pct%03d.png");
  EXPECT_EQ(expand_output("out/{stem}_x2{ext}", "50%discount.mp4", "j", tmp.path()),
            tmp.path() + "/out/50%discount_x2.mp4");
  EXPECT_EQ(expand_output("out/{stem}.mkv", "pct%03d.png", "j", tmp.path()),
            tmp.path() + "/out/pct%03d.mkv");
  EXPECT_EQ(expand_output("out/{stem}.mkv", "take_%04d.png", "j", tmp.path()),
            tmp.path() + "/out/take.mkv");
}

TEST(ExpandOutput, Errors) {
  for (const char* bad : {"out/{nope}.mp4", "out/{stem.mp4", "out/}.mp4", "x/{dir}.mp4"}) {
    try {
      expand_output(bad, "/d/a.mp4", "j", "/jobs");
      ADD_FAILURE() << bad << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitDataErr) << bad;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  try {
    expand_output("{dir}/{stem}{ext}", "/d/a.mp4", "j", "/jobs");
    ADD_FAILURE() << "overwriting the input was allowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("would overwrite its input"), std::string::npos);
  }
}

TEST(ExpandInputs, GlobsSortedLiteralsKeptDuplicatesOnce) {
  TempDir tmp;
  for (const char* f : {"clips/b.mp4", "clips/a.mp4", "clips/c.txt", "clips/take[1].mp4"}) {
    tmp.touch(f);
  }
  fs::create_directories(fs::path(tmp.path()) / "clips" / "folder.mp4");  // not a file
  JobSpec job = parse_one(
      "input:\n  - clips/*.mp4\n  - clips/a.mp4\n  - missing.mp4\n"
      "  - clips/take[1].mp4\noutput: out/{stem}.mkv\n");
  job.dir = tmp.path();
  const std::string clips = tmp.path() + "/clips/";
  EXPECT_EQ(expand_inputs(job),
            (std::vector<std::string>{clips + "a.mp4", clips + "b.mp4", clips + "take[1].mp4",
                                      tmp.path() + "/missing.mp4"}));
}

TEST(ExpandInputs, GlobWithoutMatchIsNoInput) {
  TempDir tmp;
  tmp.touch("clips/a.mp4");
  JobSpec job = parse_one("input:\n  - clips/a.mp4\n  - clips/*.mov\noutput: out/{stem}.mkv\n");
  job.dir = tmp.path();
  try {
    expand_inputs(job);
    FAIL() << "no error";
  } catch (const ConfigError&) {
    FAIL() << "a missing input is not a job-file error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitNoInput);
    EXPECT_STREQ(e.what(), "jobs/t.yaml:3: input: no file matches 'clips/*.mov'");
  }
}

TEST(LoadJobFile, ReadsFileAndAnchorsPaths) {
  TempDir tmp;
  const std::string path = tmp.touch(
      "night.yaml",
      "input: a.mp4\noutput: o/{stem}.mp4\nmodel: {kind: torchscript, weights: m/sr.pt}\n");
  const auto jobs = load_job_file(path);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].file, path);
  EXPECT_EQ(jobs[0].dir, tmp.path());
  EXPECT_EQ(jobs[0].name, "night");
  EXPECT_EQ(jobs[0].model.weights, tmp.path() + "/m/sr.pt");
}

TEST(LoadJobFile, MissingFileIsNoInput) {
  try {
    load_job_file("jobs/does-not-exist.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitNoInput);
    EXPECT_STREQ(e.what(),
                 "jobs/does-not-exist.yaml: cannot open job file: No such file or directory");
  }
  TempDir tmp;
  try {
    load_job_file(tmp.path());
    FAIL() << "a folder was read as a job file";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitNoInput);
  }
}

// Every example job in the repository parses.
TEST(JobFiles, ExamplesInRepositoryParse) {
  const fs::path jobs_dir = fs::path(WM_SOURCE_DIR) / "jobs";
  int parsed = 0;
  for (const auto& entry : fs::directory_iterator(jobs_dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    std::vector<JobSpec> jobs;
    EXPECT_NO_THROW(jobs = load_job_file(entry.path().string()));
    EXPECT_FALSE(jobs.empty());
    ++parsed;
  }
  EXPECT_GE(parsed, 2);  // at least upscale-x4-bicubic.yaml and decode-latents.yaml
}

}  // namespace
}  // namespace wm
