// wmbatch loads LibTorch only when a job needs it (src/models/torch_side.h): the real binary, with
// the dynamic loader's own record of every library it maps (LD_DEBUG=files), on a CPU lanczos
// job, a neural job, validation errors and --version; the one-line error and exit 70 when its
// module is missing; and the table found without loading in a program that links the LibTorch
// side (this one).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/model.h"
#include "src/models/registry.h"
#include "src/models/torch/torch_kinds.h"
#include "src/models/torch_side.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kSrvgg =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/srvgg-tiny/model.pth";

struct Traced {
  CommandResult result;
  std::string loads;  // the loader's record: a "file=NAME [..]; needed by/dynamically loaded by"
                      // line per library mapped
};

// Runs `wmbatch` (build/wmbatch unless given) with ARGS under LD_DEBUG=files.
Traced traced_run(const TempDir& dir, const std::vector<std::string>& args,
                  const std::string& wmbatch = wmbatch_path()) {
  const std::string prefix = dir.file("ld");
  std::vector<std::string> argv = {"env",   "LD_DEBUG=files", "LD_DEBUG_OUTPUT=" + prefix,
                                   wmbatch, "--progress",     "none"};
  argv.insert(argv.end(), args.begin(), args.end());
  Traced t;
  t.result = run_command(argv);
  // One file per process: ld.<pid>.
  for (const std::string& name : list_dir(dir.path())) {
    if (name.rfind("ld.", 0) == 0) {
      t.loads += read_text(dir.file(name));
      std::filesystem::remove(dir.file(name));
    }
  }
  return t;
}

bool loaded(const Traced& t, const std::string& library) {
  return t.loads.find("file=" + library) != std::string::npos ||
         t.loads.find("/" + library) != std::string::npos;
}

// The record is there at all (so "not loaded" means something): libavcodec, which every run maps.
void expect_recorded(const Traced& t) {
  ASSERT_TRUE(loaded(t, "libavcodec")) << "no loader record:\n" << t.result.output;
}

void expect_no_libtorch(const Traced& t) {
  expect_recorded(t);
  EXPECT_FALSE(loaded(t, "wmbatch-torch.so")) << t.result.output;
  EXPECT_FALSE(loaded(t, "libtorch")) << t.result.output;
  EXPECT_FALSE(loaded(t, "libc10")) << t.result.output;
}

std::string make_input(const TempDir& dir) {
  ClipSpec spec;
  spec.width = 16;
  spec.height = 12;
  spec.frames = 2;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  return dir.file("in.mp4");
}

std::string write_job(const TempDir& dir, const std::string& model) {
  write_text(dir.file("job.yaml"),
             "input: in.mp4\noutput: out.mkv\non_exists: overwrite\n"
             "devices: cpu\nencode: {codec: ffv1}\nmodel: " +
                 model + "\n");
  return dir.file("job.yaml");
}

TEST(TorchSide, CpuLanczosJobDoesNotLoadLibTorch) {
  TempDir dir("torch_side");
  make_input(dir);
  const Traced t = traced_run(dir, {write_job(dir, "{kind: lanczos, scale: 2}")});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.output;
  const Probe p = probe(dir.file("out.mkv"));
  EXPECT_EQ(p.width, 32);
  EXPECT_EQ(p.video_frames, 2);
  expect_no_libtorch(t);
}

TEST(TorchSide, BicubicJobAndVersionAndValidationErrorsDoNotLoadLibTorch) {
  TempDir dir("torch_side");
  make_input(dir);
  Traced t = traced_run(dir, {write_job(dir, "{kind: bicubic, scale: 3}")});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.output;
  EXPECT_EQ(probe(dir.file("out.mkv")).width, 48);
  expect_no_libtorch(t);

  t = traced_run(dir, {"--version"});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.output;
  expect_no_libtorch(t);

  // A neural job that fails validation (no weights) stops before any model.
  t = traced_run(dir, {write_job(dir, "{kind: realesrgan, scale: 2}")});
  EXPECT_EQ(t.result.exit_code, 65) << t.result.output;
  EXPECT_NE(t.result.output.find("weights"), std::string::npos) << t.result.output;
  expect_no_libtorch(t);
}

TEST(TorchSide, NeuralJobLoadsLibTorchAndRuns) {
  TempDir dir("torch_side");
  make_input(dir);
  const Traced t = traced_run(dir, {write_job(dir, "{kind: realesrgan, weights: '" + kSrvgg + "'}"),
                                    "--log-level", "debug"});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.output;
  const Probe p = probe(dir.file("out.mkv"));
  EXPECT_EQ(p.width, 64);  // the tiny SRVGG is a ×4 network
  EXPECT_EQ(p.height, 48);
  EXPECT_EQ(p.video_frames, 2);
  expect_recorded(t);
  EXPECT_TRUE(loaded(t, "wmbatch-torch.so")) << t.loads;
  EXPECT_TRUE(loaded(t, "libtorch")) << t.loads;
  EXPECT_NE(t.result.output.find("loaded the LibTorch side"), std::string::npos) << t.result.output;
}

TEST(TorchSide, MissingModuleFailsTheNeuralJobWithExit70) {
  TempDir dir("torch_side");
  make_input(dir);
  // wmbatch alone in a folder: no wmbatch-torch.so beside it.
  const std::string alone = dir.file("wmbatch");
  std::filesystem::copy_file(wmbatch_path(), alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);

  CommandResult r = run_command({alone, "--progress", "none",
                                 write_job(dir, "{kind: realesrgan, weights: '" + kSrvgg + "'}")});
  EXPECT_EQ(r.exit_code, 70) << r.output;
  EXPECT_NE(r.output.find("cannot load LibTorch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir.file("wmbatch-torch.so")), std::string::npos) << r.output;
  EXPECT_FALSE(exists(dir.file("out.mkv")));

  // The built-in resampler still runs.
  r = run_command({alone, "--progress", "none", write_job(dir, "{kind: lanczos, scale: 2}")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out.mkv")).width, 32);
}

// This test program links the LibTorch side: the table is found without loading any module.
TEST(TorchSide, LinkedInTableNeedsNoModule) {
  EXPECT_TRUE(models::torch_side_loaded());
  const models::TorchModels& t = models::torch_models();
  EXPECT_NE(t.make_model, nullptr);
  ModelConfig config;
  config.kind = "realesrgan";
  config.task = "upscale";
  config.weights = kSrvgg;
  const std::unique_ptr<Model> model = make_model(config, Device{});
  EXPECT_EQ(model->traits().scale_num, 4);
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("wmbatch-torch.so"), std::string::npos);
}

// The registry's kinds that compute with LibTorch and the kinds the families register on the
// torch side (their *_kinds.cpp, kept in this link by the symbols CMake makes it reference) are
// the same list.
TEST(TorchSide, EveryTorchKindIsRegisteredByItsFamily) {
  std::vector<std::string> torch_kinds;
  for (const ModelKind& k : model_kinds()) {
    EXPECT_FALSE(k.torch_side && k.torch_side_on_gpu) << k.name;
    EXPECT_EQ(models::torch_kind_factory(k.name) != nullptr, k.torch_side || k.torch_side_on_gpu)
        << k.name;
    if (k.torch_side || k.torch_side_on_gpu) torch_kinds.push_back(k.name);
  }
  std::sort(torch_kinds.begin(), torch_kinds.end());
  EXPECT_EQ(models::torch_kind_names(), torch_kinds);
  EXPECT_EQ(torch_kinds,
            (std::vector<std::string>{"aoti", "bicubic", "lanczos", "realesrgan", "seedvr2",
                                      "seedvr2-vae", "torchscript", "wan2.1-vae"}));
  ModelConfig config;
  config.kind = "no-such-kind";
  try {
    models::torch_models().make_model(config, Device{});
    ADD_FAILURE() << "an unregistered kind was built";
  } catch (const ModelError& e) {
    EXPECT_EQ(e.exit_code(), kExitSoftware);
    EXPECT_NE(std::string(e.what()).find("no-such-kind"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wm::test
