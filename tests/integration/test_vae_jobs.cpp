// The Wan2.1 VAE through the real job path: wmbatch on YAML jobs, golden vectors from the
// reference implementation (tests/data/golden/wan21-tiny, random weights, dim 16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

const std::string kGolden = golden_dir();

std::string vae_model(const std::string& extra = "") {
  return "model: {kind: wan2.1-vae, weights: '" + kGolden + "weights.safetensors', dim: 16" +
         extra + "}\n";
}

// A 64×48 H.264 clip of `frames` frames (the VAE jobs' input; sizes are multiples of 8).
void make_small_clip(const std::string& path, int frames, bool audio) {
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = frames;
  spec.audio = audio;
  make_clip(path, spec);
}

std::vector<float> tensor(const std::string& path, const std::string& name,
                          std::vector<int64_t>* shape = nullptr) {
  io::SafetensorsFile file(path);
  const io::TensorInfo& t = file.info(name);
  EXPECT_EQ(t.dtype, "F32");
  if (shape) *shape = t.shape;
  std::vector<float> out(t.bytes / 4);
  std::memcpy(out.data(), t.data, t.bytes);
  return out;
}

struct GoldenCase {
  const char* name;
  const char* task;
  const char* output_tensor;
  int slice_frames;  // 0: auto
};

class VaeGolden : public testing::TestWithParam<GoldenCase> {};

TEST_P(VaeGolden, MatchesReferenceThroughWmbatch) {
  const GoldenCase c = GetParam();
  TempDir dir("vae-golden");
  const std::string golden = kGolden + c.name + ".safetensors";
  write_text(dir.file("job.yaml"), std::string("task: ") + c.task + "\ninput: '" + golden +
                                       "'\ninput_tensor: input\noutput: out.safetensors\n" +
                                       "slice_frames: " + std::to_string(c.slice_frames) + "\n" +
                                       vae_model());
  CommandResult r = wmbatch({dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> got_shape, want_shape;
  const auto got = tensor(dir.file("out.safetensors"), c.output_tensor, &got_shape);
  const auto want = tensor(golden, "output", &want_shape);
  EXPECT_EQ(got_shape, want_shape);
  const double err = max_abs_diff(got, want);
  EXPECT_LE(err, 1e-4) << c.name;
  RecordProperty("max_abs_error", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(Golden, VaeGolden,
                         testing::Values(GoldenCase{"decode_t5", "decode_latents", "output", 0},
                                         GoldenCase{"decode_t9", "decode_latents", "output", 2},
                                         GoldenCase{"decode_t9", "decode_latents", "output", 3},
                                         GoldenCase{"encode_t17", "encode_latents", "latent", 0},
                                         GoldenCase{"encode_t17", "encode_latents", "latent", 8}),
                         [](const testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name) + "_slices" +
                                  std::to_string(info.param.slice_frames);
                         });

// A clip whose frame count is not 1+4k: encode pads with the last frame, decode trims back.
TEST(VaeJobs, EncodeThenDecodeKeepsFrameCount) {
  TempDir dir("vae-roundtrip");
  make_small_clip(dir.file("clip.mp4"), 7, /*audio=*/false);
  write_text(dir.file("enc.yaml"),
             "task: encode_latents\ninput: clip.mp4\noutput: clip.safetensors\n" + vae_model());
  CommandResult r = wmbatch({dir.file("enc.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> shape;
  tensor(dir.file("clip.safetensors"), "latent", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 16, 3, 6, 8}));  // 7 frames → padded to 9 → 3
  io::SafetensorsFile latents(dir.file("clip.safetensors"));
  EXPECT_EQ(latents.metadata().at("frames"), "7");
  EXPECT_EQ(latents.metadata().at("fps"), "25");

  write_text(dir.file("dec.yaml"),
             "task: decode_latents\ninput: clip.safetensors\noutput: back.mp4\n" + vae_model() +
                 "encode: {preset: ultrafast}\n");
  r = wmbatch({dir.file("dec.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe back = probe(dir.file("back.mp4"));
  EXPECT_EQ(back.video_frames, 7);
  EXPECT_EQ(back.width, 64);
  EXPECT_EQ(back.height, 48);
  EXPECT_NEAR(back.video_duration, 7.0 / 25, 1.0 / 25);
}

// encode_latents reads video: `decode: nvdec` reaches its reader (NVDEC where there is one, else
// the software fallback with one warning), and the latents do not depend on the decoder.
TEST(VaeJobs, EncodeLatentsTakesTheDecodeMode) {
  TempDir dir("vae-nvdec");
  make_small_clip(dir.file("clip.mp4"), 5, /*audio=*/false);
  std::map<std::string, std::string> decoders;
  for (const char* mode : {"software", "nvdec"}) {
    const std::string name = mode;
    write_text(dir.file(name + ".yaml"), "task: encode_latents\ninput: clip.mp4\noutput: " + name +
                                             ".safetensors\ndecode: " + name + "\n" + vae_model());
    CommandResult r = wmbatch({dir.file(name + ".yaml"), "--report", dir.file(name + ".json")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = nlohmann::json::parse(read_text(dir.file(name + ".json")));
    decoders[name] = report.at(0).at("inputs").at(0).value("decoder", std::string("(none)"));
    if (name == "nvdec" && decoders[name] == "h264") {
      EXPECT_NE(r.output.find("clip.mp4: NVDEC not used, decoding in software: "),
                std::string::npos)
          << r.output;
    }
  }
  EXPECT_EQ(decoders["software"], "h264");
  EXPECT_TRUE(decoders["nvdec"] == "h264" || decoders["nvdec"] == "h264 (nvdec)")
      << decoders["nvdec"];
  EXPECT_EQ(tensor(dir.file("software.safetensors"), "latent"),
            tensor(dir.file("nvdec.safetensors"), "latent"));
}

TEST(VaeJobs, ReconstructReportsPsnr) {
  TempDir dir("vae-reconstruct");
  make_small_clip(dir.file("clip.mp4"), 5, /*audio=*/true);
  write_text(dir.file("job.yaml"), "task: reconstruct\ninput: clip.mp4\noutput: recon.mp4\n" +
                                       vae_model() + "encode: {preset: ultrafast}\n");
  CommandResult r = wmbatch({dir.file("job.yaml"), "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PSNR"), std::string::npos) << r.output;
  const auto report = nlohmann::json::parse(read_text(dir.file("report.json")));
  const auto& in = report[0]["inputs"][0];
  ASSERT_TRUE(in.contains("psnr")) << in.dump();
  // Random weights reconstruct nothing useful, but the measurement must be a real number.
  EXPECT_TRUE(std::isfinite(in["psnr"].get<double>()));
  EXPECT_GT(in["psnr"].get<double>(), 0.0);
  EXPECT_GE(in["ssim"].get<double>(), -1.0);
  EXPECT_LE(in["ssim"].get<double>(), 1.0);
  const Probe out = probe(dir.file("recon.mp4"));
  EXPECT_EQ(out.video_frames, 5);
  EXPECT_TRUE(out.has_audio);
}

struct BadCase {
  const char* what;
  std::string job;
  const char* expect_in_message;
};

TEST(VaeJobs, BadInputsExit65WithClearErrors) {
  TempDir dir("vae-bad");
  write_text(dir.file("junk.safetensors"), "this is not a safetensors file at all");
  // Latents with 8 channels instead of 16.
  std::vector<float> zeros(8 * 2 * 3 * 4, 0.f);
  io::write_safetensors(dir.file("eight.safetensors"),
                        {{"latent", "F32", {8, 2, 3, 4}, zeros.data(), zeros.size() * 4}});
  const std::string decode = "task: decode_latents\noutput: out.safetensors\n";
  const std::vector<BadCase> cases = {
      {"bad weights file",
       decode + "input: eight.safetensors\nmodel: {kind: wan2.1-vae, weights: junk.safetensors, "
                "dim: 16}\n",
       "junk.safetensors"},
      {"wrong config",
       decode + "input: '" + kGolden + "decode_t5.safetensors'\ninput_tensor: input\n" +
           vae_model(", dim_mult: [1, 2, 2, 4]"),
       "expected shape"},
      {"wrong channel count", decode + "input: eight.safetensors\n" + vae_model(), "8 channels"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    write_text(dir.file("job.yaml"), c.job);
    CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, 65) << r.output;
    EXPECT_NE(r.output.find(c.expect_in_message), std::string::npos) << r.output;
    EXPECT_FALSE(exists(dir.file("out.safetensors")));
    EXPECT_FALSE(exists(dir.file("out.safetensors.partial")));
  }
}

}  // namespace
}  // namespace wm::test
