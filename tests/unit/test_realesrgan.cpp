// Real-ESRGAN layouts and helpers: the official architectures' key counts, parameter counts and
// exact halos (../shared/upscalers-spec.md), architecture inference and its errors, old-ESRGAN
// key names, and the Lanczos resize behind `scale:`.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/model.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/realesrgan/torch/realesrgan_weights.h"
#include "src/models/resample/torch/lanczos_resize.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/realesrgan_fault.h"

namespace wm::models {
namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/";

struct Official {
  const char* name;
  size_t tensors;
  int64_t parameters;
  int halo;
};

TEST(RealEsrgan, OfficialArchitecturesHaveTheSpecsKeysParametersAndHalos) {
  const Official all[] = {{"realesr-animevideov3", 53, 621424, 18},
                          {"realesr-general-x4v3", 101, 1213296, 34},
                          {"RealESRGAN_x4plus", 702, 16697987, 349},
                          {"RealESRGAN_x2plus", 702, 16703171, 698},
                          {"RealESRGAN_x4plus_anime_6B", 192, 4467779, 94}};
  for (const Official& o : all) {
    SCOPED_TRACE(o.name);
    const RealEsrganArch arch = realesrgan_preset(o.name);
    const auto keys = realesrgan_keys(arch);
    EXPECT_EQ(keys.size(), o.tensors);
    int64_t parameters = 0;
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, shape] : keys) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      parameters += n;
      shapes[name] = shape;
    }
    EXPECT_EQ(parameters, o.parameters);
    EXPECT_EQ(arch.exact_halo(), o.halo);
    // Inference from the keys gives the architecture back.
    const RealEsrganArch inferred = infer_realesrgan_arch(shapes, o.name);
    EXPECT_EQ(inferred.describe(), arch.describe());
  }
  EXPECT_THROW(realesrgan_preset("RealESRGAN_x8"), ModelError);
}

std::string inference_error(const std::map<std::string, std::vector<int64_t>>& shapes) {
  try {
    infer_realesrgan_arch(shapes, "m.pth");
  } catch (const ModelError& e) {
    EXPECT_EQ(e.exit_code(), kExitDataErr);
    return e.what();
  }
  ADD_FAILURE() << "inferred an architecture";
  return "";
}

TEST(RealEsrgan, InferenceNamesWhatWasExpectedAndFound) {
  std::map<std::string, std::vector<int64_t>> srvgg;
  for (const auto& [name, shape] : realesrgan_keys(realesrgan_preset("realesr-animevideov3"))) {
    srvgg[name] = shape;
  }
  auto missing = srvgg;
  missing.erase("body.17.weight");
  EXPECT_NE(inference_error(missing).find("needs 'body.17.weight' [64]"), std::string::npos);
  auto wrong = srvgg;
  wrong["body.4.weight"] = {64, 32, 3, 3};
  EXPECT_NE(inference_error(wrong).find("'body.4.weight' should be [64,64,3,3], found [64,32,3,3]"),
            std::string::npos);
  auto extra = srvgg;
  extra["head.weight"] = {3};
  EXPECT_NE(inference_error(extra).find("no tensor 'head.weight'"), std::string::npos);
  auto bad_scale = srvgg;
  bad_scale["body.34.weight"] = {40, 64, 3, 3};
  EXPECT_NE(inference_error(bad_scale).find("3·scale²"), std::string::npos);
  const std::string neither = inference_error({{"encoder.conv.weight", {8, 3, 3, 3}}});
  EXPECT_NE(neither.find("neither SRVGGNetCompact"), std::string::npos) << neither;
  EXPECT_NE(neither.find("encoder.conv.weight [8,3,3,3]"), std::string::npos) << neither;
  std::map<std::string, std::vector<int64_t>> rrdb;
  for (const auto& [name, shape] : realesrgan_keys(realesrgan_preset("RealESRGAN_x2plus"))) {
    rrdb[name] = shape;
  }
  rrdb["conv_first.weight"] = {64, 5, 3, 3};
  EXPECT_NE(inference_error(rrdb).find("expected 3 (x4), 12 (x2) or 48 (x1)"), std::string::npos);
}

// The same tensors under old-ESRGAN names (model.0, model.1.sub.N.RDBj.convk.0, ...) load as
// the official file does.
TEST(RealEsrgan, OldEsrganKeyNamesAreMapped) {
  test::TempDir tmp("esrgan-names");
  const RealEsrganWeights official = load_realesrgan_weights(kGolden + "rrdb-tiny/model.pth");
  const int blocks = official.arch.blocks;
  std::vector<io::TensorEntry> entries;
  std::vector<std::string> names;
  for (const auto& [name, t] : official.tensors) {
    std::string old = name;
    const std::string tail = name.substr(name.rfind('.') + 1);
    const std::string stem = name.substr(0, name.rfind('.'));
    if (stem == "conv_first") old = "model.0." + tail;
    if (stem == "conv_body") old = "model.1.sub." + std::to_string(blocks) + "." + tail;
    if (stem == "conv_up1") old = "model.3." + tail;
    if (stem == "conv_up2") old = "model.6." + tail;
    if (stem == "conv_hr") old = "model.8." + tail;
    if (stem == "conv_last") old = "model.10." + tail;
    if (name.rfind("body.", 0) == 0) {  // body.i.rdbj.convk → model.1.sub.i.RDBj.convk.0
      const size_t i_end = name.find('.', 5);
      const std::string i = name.substr(5, i_end - 5);
      const std::string j = name.substr(i_end + 4, 1);
      const std::string k = name.substr(name.find(".conv") + 5, 1);
      old = "model.1.sub." + i + ".RDB" + j + ".conv" + k + ".0." + tail;
    }
    io::TensorEntry e;
    e.name = old;
    e.shape = std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
    e.data = t.data_ptr<float>();
    e.bytes = size_t(t.numel()) * 4;
    entries.push_back(e);
  }
  io::write_safetensors(tmp.file("old.safetensors"), entries);
  const RealEsrganWeights mapped = load_realesrgan_weights(tmp.file("old.safetensors"));
  EXPECT_EQ(mapped.arch.describe(), official.arch.describe());
  ASSERT_EQ(mapped.tensors.size(), official.tensors.size());
  for (const auto& [name, t] : official.tensors) {
    ASSERT_TRUE(mapped.tensors.count(name)) << name;
    EXPECT_TRUE(at::equal(mapped.tensors.at(name), t)) << name;
  }
}

TEST(LanczosResize, KeepsConstantsAndLinearRampsAwayFromBorders) {
  const at::Tensor flat = at::full({1, 3, 20, 30}, 0.25f);
  const at::Tensor down = lanczos_resize(flat, 10, 15);
  ASSERT_EQ(down.sizes(), (std::vector<int64_t>{1, 3, 10, 15}));
  EXPECT_LT((down - 0.25f).abs().max().item<float>(), 1e-6f);
  // A horizontal ramp x/W sampled at output centres stays a ramp (symmetric kernel) inside.
  const int64_t w = 64;
  const at::Tensor ramp =
      (at::arange(w, at::kFloat) / float(w)).view({1, 1, 1, w}).expand({1, 1, 8, w});
  const at::Tensor half = lanczos_resize(ramp.contiguous(), 8, 32);
  for (int64_t x = 4; x < 28; ++x) {
    const double centre = (x + 0.5) * 2 - 0.5;  // in input pixels
    EXPECT_NEAR(half[0][0][3][x].item<float>(), centre / w, 1e-5) << x;
  }
  EXPECT_TRUE(at::equal(lanczos_resize(flat, 20, 30), flat));
}

TEST(RealEsrgan, TuningParsesItsKeysAndRefusesOthers) {
  const RealEsrganTuning defaults = RealEsrganTuning::parse("");
  EXPECT_EQ(defaults.str(), "fused=1,benchmark=1,graph=0,conv=fused");
  EXPECT_EQ(RealEsrganTuning::parse("fused=0,graph=1").str(),
            "fused=0,benchmark=1,graph=1,conv=fused");
  EXPECT_EQ(RealEsrganTuning::parse("conv=own").str(), "fused=1,benchmark=1,graph=0,conv=own");
  EXPECT_EQ(RealEsrganTuning::parse("conv=cudnn").str(), "fused=1,benchmark=1,graph=0,conv=cudnn");
  EXPECT_EQ(RealEsrganTuning::parse("conv=own-all,fused=1").str(),
            "fused=1,benchmark=1,graph=0,conv=own-all");
  EXPECT_THROW(RealEsrganTuning::parse("fusion=1"), ModelError);
  EXPECT_THROW(RealEsrganTuning::parse("fused=2"), ModelError);
  EXPECT_THROW(RealEsrganTuning::parse("conv=1"), ModelError);
  EXPECT_THROW(RealEsrganTuning::parse("conv=cutlass"), ModelError);
  ModelConfig config;
  config.kind = "realesrgan";
  config.weights = kGolden + std::string("srvgg-tiny/model.pth");
  config.tuning = "graph=yes";
  EXPECT_THROW(make_realesrgan(config, Device{}), ModelError);
}

// `frames` distinct random frames as a [3, frames, h, w] Planar (a lost or repeated frame shows).
Planar random_frames(int frames, int h, int w) {
  at::manual_seed(frames * 1000 + h);
  const at::Tensor t = at::rand({3, frames, h, w}, at::kFloat);
  Planar p(3, frames, h, w);
  std::memcpy(p.data.data(), t.data_ptr<float>(), p.data.size() * sizeof(float));
  return p;
}

at::Tensor as_tensor(const Planar& p) {
  return at::from_blob(const_cast<float*>(p.data.data()), {p.channels, p.frames, p.height, p.width},
                       at::kFloat)
      .clone();
}

// Turns the test fault off whatever the test's outcome.
struct FaultGuard {
  ~FaultGuard() { realesrgan_oom_fault_for_test(-1, 0); }
};

// `tiling: auto` on the CPU with the test-only fault (a real c10::OutOfMemoryError): a slice whose
// call runs out of memory is retried with fewer frames per call, then with smaller tiles, and the
// output equals the untiled run's (exact halos: SRVGG, RRDB with tiling.exact) with every frame
// in its place.
TEST(RealEsrgan, AutoTilesRetryOutOfMemoryWithSmallerCallsAndMatchTheUntiledOutput) {
  FaultGuard guard;
  const Device cpu;
  struct Case {
    const char* model;
    int frames, height, width;
    bool exact;
  };
  for (const Case& c :
       {Case{"srvgg-tiny", 3, 120, 160, false}, Case{"rrdb-tiny", 2, 200, 256, true},
        Case{"rrdb-x2-tiny", 2, 400, 512, true}}) {
    SCOPED_TRACE(c.model);
    ModelConfig config;
    config.kind = "realesrgan";
    config.weights = kGolden + c.model + "/model.pth";
    config.exact_tiles = c.exact;
    const at::Tensor whole =
        as_tensor(make_realesrgan(config, cpu)
                      ->open_session(cpu)
                      ->run(random_frames(c.frames, c.height, c.width), RunContext{}));
    config.auto_tiles = true;
    const auto model = make_realesrgan(config, cpu);
    ASSERT_TRUE(model->traits().halo_exact);
    const int64_t pixels = int64_t(c.height) * c.width;
    // The first call (the whole slice) fails once: frames are then split over calls.
    realesrgan_oom_fault_for_test(0, 0);
    const at::Tensor split = as_tensor(
        model->open_session(cpu)->run(random_frames(c.frames, c.height, c.width), RunContext{}));
    ASSERT_EQ(split.sizes(), whole.sizes());
    EXPECT_LE((split - whole).abs().max().item<float>(), 1e-5f);
    // Every call above 3/4 of a frame fails: one frame per call, then tiles.
    realesrgan_oom_fault_for_test(-1, pixels * 3 / 4);
    const at::Tensor tiled = as_tensor(
        model->open_session(cpu)->run(random_frames(c.frames, c.height, c.width), RunContext{}));
    ASSERT_EQ(tiled.sizes(), whole.sizes());
    EXPECT_LE((tiled - whole).abs().max().item<float>(), 1e-5f);
    // Nothing fits: the error is the out-of-memory one, after the smallest tiles.
    realesrgan_oom_fault_for_test(-1, 100);
    try {
      model->open_session(cpu)->run(random_frames(1, c.height, c.width), RunContext{});
      ADD_FAILURE() << "expected out of memory";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    }
    realesrgan_oom_fault_for_test(-1, 0);
  }
}

}  // namespace
}  // namespace wm::models
