// The front door's job side (issue 26): one-line commands as job documents (src/job_command.h),
// models by name (src/models/catalog.h, the table configs/models.yaml), folders as inputs, and
// standard input and output in job files. The CLI runs of the same are
// tests/integration/test_front_door.cpp.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/base/std_streams.h"
#include "src/job_command.h"
#include "src/job_spec.h"
#include "src/media_names.h"
#include "src/models/catalog.h"
#include "src/models/registry.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm {
namespace {

namespace fs = std::filesystem;

// A file under `dir` (folders made), holding `text`; its path.
std::string touch(const test::TempDir& dir, const std::string& relative,
                  const std::string& text = "x") {
  const fs::path p = fs::path(dir.path()) / relative;
  fs::create_directories(p.parent_path());
  test::write_text(p.string(), text);
  return p.string();
}

// The models folder of a test, restored to none (the environment's) at the end.
struct ModelsDirScope {
  explicit ModelsDirScope(const std::string& dir) { set_models_dir(dir); }
  ~ModelsDirScope() { set_models_dir(""); }
};

std::string error_of(const std::function<void()>& f, int* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code) *code = e.exit_code();
    return e.what();
  }
  return "";
}

// --- the table of released names ----------------------------------------------------------------

TEST(ModelCatalog, TheShippedTableNamesRegistryKindsWithSourcesAndHashes) {
  const ModelCatalog& catalog = model_catalog();
  ASSERT_FALSE(catalog.path.empty()) << "configs/models.yaml not found";
  EXPECT_NE(catalog.path.find("models.yaml"), std::string::npos);
  const ReleasedModel* anime = catalog.find("realesr-animevideov3");
  ASSERT_NE(anime, nullptr);
  EXPECT_EQ(anime->kind, "realesrgan");
  EXPECT_EQ(anime->scale, 4);
  EXPECT_EQ(anime->files.front(), "realesr-animevideov3.pth");
  EXPECT_EQ(catalog.find_file("RealESRGAN_x2plus.pth")->scale, 2);
  EXPECT_EQ(catalog.find("realesrgan_x4PLUS"), catalog.find("RealESRGAN_x4plus")) << "any case";
  const std::regex hex("[0-9a-f]{64}");
  for (const ReleasedModel& m : catalog.models) {
    SCOPED_TRACE(m.name);
    EXPECT_NE(find_model_kind(m.kind), nullptr) << m.kind << " is no registry kind";
    EXPECT_FALSE(m.source.empty());
    ASSERT_EQ(m.sha256.size(), m.files.size());
    for (const std::string& h : m.sha256) {
      EXPECT_TRUE(h.empty() || std::regex_match(h, hex)) << h;
    }
  }
  EXPECT_EQ(anime->sha256.front().size(), 64u);
}

TEST(ModelCatalog, AMalformedTableNamesItsLine) {
  test::TempDir dir("front-door");
  const std::string path = touch(dir, "models.yaml",
                                 "a:\n  kind: realesrgan\n  files: [a.pth]\nb:\n  kind: x\n  "
                                 "files: [b.pth]\n  sclae: 2\n");
  int code = 0;
  const std::string e = error_of([&] { read_catalog(path); }, &code);
  EXPECT_EQ(code, 65) << e;
  EXPECT_NE(e.find(path + ":7: b.sclae: unknown key"), std::string::npos) << e;
}

TEST(ModelCatalog, KindsFromFileNames) {
  EXPECT_EQ(kind_of_weights("/m/realesr-general-x4v3.pth"), "realesrgan");
  EXPECT_EQ(kind_of_weights("/m/Wan2.1_VAE.safetensors"), "wan2.1-vae");
  EXPECT_EQ(kind_of_weights("net.pt"), "torchscript");
  EXPECT_EQ(kind_of_weights("net.pt2"), "aoti");
  EXPECT_EQ(kind_of_weights("other.safetensors"), "") << "an upscaler or a VAE: cannot tell";
  EXPECT_TRUE(is_model_name("realesr-animevideov3"));
  EXPECT_TRUE(is_model_name("Wan2.1_VAE")) << "a dot in a name is no weights extension";
  EXPECT_FALSE(is_model_name("models/x"));
  EXPECT_FALSE(is_model_name("x.pth"));
  EXPECT_FALSE(is_model_name("x.SAFETENSORS"));
}

// --- the models folder --------------------------------------------------------------------------

TEST(ModelsFolder, FlagThenEnvironmentThenXdgThenHome) {
  const char* saved_models = getenv("WMBATCH_MODELS");
  const char* saved_xdg = getenv("XDG_DATA_HOME");
  const std::string keep_models = saved_models ? saved_models : "";
  const std::string keep_xdg = saved_xdg ? saved_xdg : "";
  ::setenv("WMBATCH_MODELS", "/srv/models", 1);
  ::setenv("XDG_DATA_HOME", "/home/u/.data", 1);
  {
    ModelsDirScope flag("/opt/m");
    EXPECT_EQ(models_folder().path, "/opt/m");
    EXPECT_EQ(models_folder().from, "--models-dir");
  }
  EXPECT_EQ(models_folder().path, "/srv/models");
  ::unsetenv("WMBATCH_MODELS");
  EXPECT_EQ(models_folder().path, "/home/u/.data/wmbatch/models");
  ::setenv("XDG_DATA_HOME", "relative", 1);  // invalid by the XDG spec: ignored
  ::setenv("HOME", getenv("HOME") ? getenv("HOME") : "/root", 1);
  EXPECT_EQ(models_folder().from, "HOME");
  EXPECT_NE(models_folder().path.find("/.local/share/wmbatch/models"), std::string::npos);
  if (saved_models) ::setenv("WMBATCH_MODELS", keep_models.c_str(), 1);
  if (saved_xdg) {
    ::setenv("XDG_DATA_HOME", keep_xdg.c_str(), 1);
  } else {
    ::unsetenv("XDG_DATA_HOME");
  }
}

TEST(ModelsFolder, ANameInAJobFileFindsItsFileAndKind) {
  test::TempDir dir("front-door");
  const std::string models = dir.path() + "/models";
  const std::string file = touch(dir, "models/realesr-animevideov3.pth");
  touch(dir, "models/mine.pt");
  ModelsDirScope scope(models);
  // No kind: the released name says realesrgan.
  JobSpec job = parse_job_text(
      "input: a.mp4\noutput: b.mp4\nmodel: {weights: realesr-animevideov3}\n", "/d/job.yaml")[0];
  EXPECT_EQ(job.model.kind, "realesrgan");
  EXPECT_EQ(job.model.weights, file);
  EXPECT_EQ(job.weights_line, 3);
  // A file of the folder by its stem, the kind from its extension.
  job = parse_job_text("input: a.mp4\noutput: b.mp4\nmodel: {weights: mine}\n", "/d/job.yaml")[0];
  EXPECT_EQ(job.model.kind, "torchscript");
  // A name that is not there: exit 66, what was searched and what is there.
  int code = 0;
  std::string e = error_of(
      [] {
        parse_job_text("input: a.mp4\noutput: b.mp4\nmodel: {kind: realesrgan, weights: nosuch}\n",
                       "/d/job.yaml");
      },
      &code);
  EXPECT_EQ(code, 66) << e;
  EXPECT_NE(e.find("/d/job.yaml:3: model.weights: model 'nosuch': none of nosuch.pth, "
                   "nosuch.safetensors"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(models + " (from --models-dir; it holds mine.pt, realesr-animevideov3.pth)"),
            std::string::npos)
      << e;
  // A released name whose file is not there: where it comes from.
  e = error_of([] {
    parse_job_text("input: a.mp4\noutput: b.mp4\nmodel: {weights: RealESRGAN_x4plus}\n",
                   "/d/job.yaml");
  });
  EXPECT_NE(e.find("get RealESRGAN_x4plus.pth from https://github.com/xinntao/Real-ESRGAN/"
                   "releases/download/v0.1.0/RealESRGAN_x4plus.pth into " +
                   models),
            std::string::npos)
      << e;
  // A .safetensors file that is no released one: the kind must be given.
  touch(dir, "models/net.safetensors");
  e = error_of([] {
    parse_job_text("input: a.mp4\noutput: b.mp4\nmodel: {weights: net}\n", "/d/job.yaml");
  });
  EXPECT_NE(e.find("model.weights: cannot tell the model's kind from 'net'; give model.kind"),
            std::string::npos)
      << e;
  const std::vector<ModelFile> files = list_models(models);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].file, "mine.pt");
  EXPECT_EQ(files[2].name, "realesr-animevideov3");
  EXPECT_EQ(files[2].scale, 4);
}

// The example job files of configs/jobs (installed with the table) are valid jobs, given the
// models they name.
TEST(ModelsFolder, TheShippedExampleJobsParse) {
  test::TempDir dir("front-door");
  touch(dir, "models/realesr-animevideov3.pth");
  touch(dir, "models/Wan2.1_VAE.safetensors");
  ModelsDirScope scope(dir.path() + "/models");
  int parsed = 0;
  for (const auto& e : fs::directory_iterator(std::string(WM_SOURCE_DIR) + "/configs/jobs")) {
    SCOPED_TRACE(e.path().string());
    const std::vector<JobSpec> jobs = load_job_file(e.path().string());
    ASSERT_EQ(jobs.size(), 1u);
    ++parsed;
    if (e.path().filename() == "upscale-animevideov3.yaml") {
      EXPECT_EQ(jobs[0].model.kind, "realesrgan");
      EXPECT_EQ(jobs[0].model.weights, dir.path() + "/models/realesr-animevideov3.pth");
    }
    if (e.path().filename() == "stream.yaml") {
      EXPECT_EQ(jobs[0].inputs[0], kStdinName);
      EXPECT_EQ(jobs[0].output, kStdoutName);
    }
  }
  EXPECT_GE(parsed, 4);
}

// --- folders as inputs --------------------------------------------------------------------------

TEST(FolderInput, IsItsMediaFilesInNameOrder) {
  test::TempDir dir("front-door");
  for (const char* f : {"photos/b.png", "photos/a.png", "photos/C.jpg", "photos/notes.txt",
                        "photos/.hidden.png", "photos/sub/d.png"}) {
    touch(dir, f);
  }
  const JobSpec job =
      parse_job_text("input: photos\noutput: out/{stem}.png\n", dir.path() + "/job.yaml")[0];
  const std::vector<std::string> inputs = expand_inputs(job);
  ASSERT_EQ(inputs.size(), 3u);
  EXPECT_EQ(inputs[0], dir.path() + "/photos/C.jpg");
  EXPECT_EQ(inputs[1], dir.path() + "/photos/a.png");
  EXPECT_EQ(inputs[2], dir.path() + "/photos/b.png");
  // A folder names several files: {stem} is needed; outputs may not land in the folder.
  std::string e = error_of(
      [&] { parse_job_text("input: photos\noutput: one.png\n", dir.path() + "/job.yaml"); });
  EXPECT_NE(e.find("output: must contain {stem}"), std::string::npos) << e;
  e = error_of([&] {
    parse_job_text("input: photos\noutput: photos/{stem}_x2.png\n", dir.path() + "/job.yaml");
  });
  EXPECT_NE(e.find("would land in input folder"), std::string::npos) << e;
  // A folder without media files: exit 66 at the job's line.
  touch(dir, "empty/readme.md");
  int code = 0;
  e = error_of(
      [&] {
        expand_inputs(
            parse_job_text("input: empty\noutput: out/{stem}.mkv\n", dir.path() + "/job.yaml")[0]);
      },
      &code);
  EXPECT_EQ(code, 66) << e;
  EXPECT_NE(e.find("holds no video or image files"), std::string::npos) << e;
}

TEST(MediaNames, ByExtension) {
  EXPECT_EQ(media_name_kind("a/b.MKV"), MediaName::kVideo);
  EXPECT_EQ(media_name_kind("b.tiff"), MediaName::kImage);
  EXPECT_EQ(media_name_kind("z.safetensors"), MediaName::kTensor);
  EXPECT_EQ(media_name_kind("job.yaml"), MediaName::kNone);
  EXPECT_EQ(media_name_kind("dir.mp4/job"), MediaName::kNone);
}

// --- standard input and output ------------------------------------------------------------------

TEST(StandardStreams, InJobFiles) {
  for (const char* spelling : {"'-'", "pipe:0", "/dev/stdin"}) {
    SCOPED_TRACE(spelling);
    const JobSpec job = parse_job_text(
        std::string("input: ") + spelling + "\noutput: out/{stem}.mkv\n", "/d/job.yaml")[0];
    ASSERT_EQ(job.inputs.size(), 1u);
    EXPECT_EQ(job.inputs[0], kStdinName);
    EXPECT_EQ(expand_inputs(job), std::vector<std::string>{kStdinName});
    EXPECT_EQ(expand_output(job.output, kStdinName, job.name, job.dir), "/d/out/stdin.mkv");
  }
  JobSpec job = parse_job_text("input: a.mkv\noutput: '-'\nformat: nut\n", "/d/job.yaml")[0];
  EXPECT_EQ(job.output, kStdoutName);
  EXPECT_EQ(job.encode.container, "nut");
  EXPECT_EQ(expand_output(job.output, "/d/a.mkv", job.name, job.dir), kStdoutName);
  job = parse_job_text("input: a.mkv\noutput: /dev/stdout\nformat: y4m\n", "/d/job.yaml")[0];
  EXPECT_EQ(job.encode.container, "yuv4mpegpipe");
  EXPECT_EQ(job.encode.codec, "wrapped_avframe") << "Y4M holds raw pictures";
  std::string e = error_of([] { parse_job_text("input: a.mkv\noutput: '-'\n", "/d/job.yaml"); });
  EXPECT_NE(e.find("/d/job.yaml:2: output: standard output needs format: mkv, nut, y4m or ts"),
            std::string::npos)
      << e;
  e = error_of([] { parse_job_text("input: a.mkv\noutput: '-'\nformat: mp4\n", "/d/job.yaml"); });
  EXPECT_NE(e.find("/d/job.yaml:3: format: must be mkv, nut, y4m or ts"), std::string::npos) << e;
  e = error_of([] { parse_job_text("input: a.mkv\noutput: b.mkv\nformat: nut\n", "/d/job.yaml"); });
  EXPECT_NE(e.find("/d/job.yaml:3: format: applies only to output: -"), std::string::npos) << e;
  e = error_of([] { parse_job_text("input: ['-', pipe:0]\noutput: o/{stem}.mkv\n", "/d/j.yaml"); });
  EXPECT_NE(e.find("standard input is given twice"), std::string::npos) << e;
}

// --- one-line commands --------------------------------------------------------------------------

TEST(CommandJob, BuildsTheJobAJobFileWouldHold) {
  test::TempDir dir("front-door");
  CommandJob c;
  c.name = "upscale";
  c.cwd = dir.path();
  c.inputs = {"clips/a.mp4", "b.mp4"};
  c.output = "out/";
  c.scale = "4";
  c.tile = "256";
  c.devices = "0,1";
  c.precision = "fp32";
  c.crf = "20";
  c.preset = "veryfast";
  c.on_exists = "skip";
  const std::string yaml = command_job_yaml(c);
  const JobSpec job = parse_command_job(c, "wmbatch upscale", "wmbatch upscale x");
  EXPECT_EQ(job.name, "upscale");
  EXPECT_EQ(job.inputs,
            (std::vector<std::string>{dir.path() + "/clips/a.mp4", dir.path() + "/b.mp4"}));
  EXPECT_EQ(job.output, dir.path() + "/out/{stem}{ext}") << yaml;
  EXPECT_EQ(job.model.kind, "lanczos");
  EXPECT_EQ(job.model.scale, 4);
  EXPECT_EQ(job.tiling.tile_width, 256);
  EXPECT_EQ(job.devices, "list");
  EXPECT_EQ(job.device_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(job.encode.crf, 20);
  EXPECT_EQ(job.encode.preset, "veryfast");
  EXPECT_EQ(job.on_exists, OnExists::kSkip);
  EXPECT_EQ(job.rerun, "wmbatch upscale x");
  // The printed job is a job file: the same job from a file anywhere.
  test::TempDir elsewhere("front-door");
  const std::string file = touch(elsewhere, "job.yaml", yaml);
  const JobSpec again = load_job_file(file)[0];
  EXPECT_EQ(again.inputs, job.inputs);
  EXPECT_EQ(again.output, job.output);
  EXPECT_EQ(again.output_settings, job.output_settings);
}

TEST(CommandJob, ErrorsNameTheOption) {
  CommandJob c;
  c.name = "upscale";
  c.cwd = "/tmp";
  c.inputs = {"a.mp4"};
  c.output = "b.mp4";
  c.scale = "5";
  std::string e = error_of([&] { parse_command_job(c, "wmbatch upscale", ""); });
  EXPECT_EQ(e, "wmbatch upscale: --scale: must be 2, 3 or 4 (got 5)");
  c.scale.clear();
  c.tile = "big";
  e = error_of([&] { parse_command_job(c, "wmbatch upscale", ""); });
  EXPECT_EQ(e, "wmbatch upscale: --tile: must be an integer (got 'big')");
  c.tile.clear();
  c.output = "-";
  e = error_of([&] { parse_command_job(c, "wmbatch upscale", ""); });
  EXPECT_NE(e.find("wmbatch upscale: -o: standard output needs format"), std::string::npos) << e;
  c.output.clear();
  int code = 0;
  e = error_of([&] { parse_command_job(c, "wmbatch upscale", ""); }, &code);
  EXPECT_EQ(code, 64) << e;
  c.task = Task::kDecodeLatents;
  c.name = "decode-latents";
  c.output = "o.mp4";
  c.inputs = {"z.safetensors"};
  e = error_of([&] { parse_command_job(c, "wmbatch decode-latents", ""); });
  EXPECT_NE(e.find("wmbatch decode-latents: --model: required for task decode_latents"),
            std::string::npos)
      << e;
  EXPECT_EQ(command_error_text("elsewhere:3: x: y", "wmbatch upscale"), "elsewhere:3: x: y");
  EXPECT_EQ(command_error_text("wmbatch upscale:2: input: no file matches 'x*'", "wmbatch upscale"),
            "wmbatch upscale: input: no file matches 'x*'");
}

}  // namespace
}  // namespace wm
