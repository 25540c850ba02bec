// Wan2.1 VAE: golden vectors (float64 reference, dim=16 random weights), exact causal slicing,
// strict weight checking and input validation.
#include "src/models/wan21/wan21_vae.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/support/run.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/torch/offload.h"
#include "src/base/error.h"
#include "src/models/wan21/torch/wan21_blocks.h"
#include "src/weights/safetensors.h"
#include "tests/support/planar_ops.h"

namespace fs = std::filesystem;
using wm::Planar;
using wm::RunContext;

namespace {

using wm::test::concat;
using wm::test::frames;
using wm::test::max_abs_diff;
using wm::test::read_planar;

std::string golden(const std::string& name) { return ::wm::test::golden_file(name); }

// The tiny golden config (dim=16) from meta.json.
wm::ModelConfig tiny_config(const std::string& task) {
  std::ifstream in(golden("meta.json"));
  const nlohmann::json meta = nlohmann::json::parse(in);
  const auto& c = meta.at("config");
  wm::ModelConfig config;
  config.kind = "wan2.1-vae";
  config.task = task;
  config.weights = golden("weights.safetensors");
  auto& arch = wm::edit_options<wm::models::Wan21VaeOptions>(config);
  arch.dim = c.at("dim").get<int>();
  arch.z_dim = c.at("z_dim").get<int>();
  arch.dim_mult = c.at("dim_mult").get<std::vector<int>>();
  arch.num_res_blocks = c.at("num_res_blocks").get<int>();
  arch.temporal_downsample = c.at("temperal_downsample").get<std::vector<bool>>();
  return config;
}

std::unique_ptr<wm::Model> tiny_model(const std::string& task) {
  return wm::models::make_wan21_vae(tiny_config(task), wm::Device{});
}

struct GoldenCase {
  Planar input;
  Planar output;
};

GoldenCase golden_case(const std::string& name) {
  wm::io::SafetensorsFile file(golden(name + ".safetensors"));
  return {read_planar(file, "input"), read_planar(file, "output")};
}

RunContext slice_context(int64_t index, bool first, int tile = 0) {
  RunContext ctx;
  ctx.slice_index = index;
  ctx.first_slice = first;
  ctx.last_slice = false;
  ctx.tile_index = tile;
  return ctx;
}

// Runs `input` through one session as consecutive slices of `sizes` frames; checks each slice's
// output frame count and returns the outputs concatenated.
Planar run_slices(const wm::Model& model, const Planar& input, const std::vector<int>& sizes) {
  auto session = model.open_session(wm::Device{});
  std::vector<Planar> outs;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool first = i == 0;
    Planar out = session->run(frames(input, t0, sizes[i]), slice_context(int64_t(i), first));
    const int64_t expected = first ? model.output_frames(sizes[i])
                                   : model.output_frames(t0 + sizes[i]) - model.output_frames(t0);
    EXPECT_EQ(out.frames, expected) << "slice " << i;
    outs.push_back(std::move(out));
    t0 += sizes[i];
  }
  EXPECT_EQ(t0, input.frames);
  return concat(outs);
}

// Runs `fn` expecting a ModelError whose message contains every one of `parts`.
void expect_model_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const wm::ModelError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
    return;
  }
  ADD_FAILURE() << "no ModelError";
}

// --- golden vectors --------------------------------------------------------------------------

void check_golden(const std::string& task, const std::string& name) {
  auto model = tiny_model(task);
  GoldenCase g = golden_case(name);
  Planar out = model->open_session(wm::Device{})->run(std::move(g.input), slice_context(0, true));
  const double err = max_abs_diff(out, g.output);
  std::cout << "[ golden   ] " << name << " max abs error " << err << "\n";
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(err));
  EXPECT_LE(err, 1e-4);
}

TEST(Wan21VaeGolden, DecodeT5) { check_golden("decode", "decode_t5"); }
TEST(Wan21VaeGolden, DecodeT9) { check_golden("decode", "decode_t9"); }
TEST(Wan21VaeGolden, EncodeT17) { check_golden("encode", "encode_t17"); }

// --- slicing ---------------------------------------------------------------------------------

class Wan21VaeSlicing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    decoder_ = tiny_model("decode").release();
    encoder_ = tiny_model("encode").release();
  }
  static void TearDownTestSuite() {
    delete decoder_;
    delete encoder_;
  }
  // Slices of `sizes` frames against one whole pass.
  static void expect_same_as_one_pass(const wm::Model& model, const Planar& input,
                                      const std::vector<std::vector<int>>& plans) {
    const Planar whole = run_slices(model, input, {input.frames});
    for (const auto& sizes : plans) {
      std::string label;
      for (int s : sizes) label += std::to_string(s) + " ";
      const double err = max_abs_diff(run_slices(model, input, sizes), whole);
      std::cout << "[ slicing  ] " << model.traits().name << " slices " << label << "max diff "
                << err << "\n";
      EXPECT_LE(err, 1e-5) << label;
    }
  }
  static wm::Model* decoder_;
  static wm::Model* encoder_;
};
wm::Model* Wan21VaeSlicing::decoder_ = nullptr;
wm::Model* Wan21VaeSlicing::encoder_ = nullptr;

TEST_F(Wan21VaeSlicing, DecodeSlicesEqualOnePass) {
  const Planar input = golden_case("decode_t9").input;
  expect_same_as_one_pass(*decoder_, input,
                          {{1, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 1}, {3, 3, 3}, {1, 5, 3}});
}

TEST_F(Wan21VaeSlicing, EncodeSlicesEqualOnePass) {
  const Planar input = golden_case("encode_t17").input;
  expect_same_as_one_pass(*encoder_, input, {{5, 4, 4, 4}, {9, 8}, {1, 8, 4, 4}});
}

TEST_F(Wan21VaeSlicing, TilesKeepSeparateState) {
  // Two tiles (different inputs) interleaved on one session equal their own one-pass results.
  const Planar a = golden_case("decode_t9").input;
  Planar b = a.clone();
  for (float& v : b.data) v = -0.5f * v;
  const Planar whole_a = run_slices(*decoder_, a, {9});
  const Planar whole_b = run_slices(*decoder_, b, {9});
  auto session = decoder_->open_session(wm::Device{});
  std::vector<Planar> outs_a, outs_b;
  const int sizes[] = {4, 5};
  int t0 = 0;
  for (int i = 0; i < 2; ++i) {
    outs_a.push_back(session->run(frames(a, t0, sizes[i]), slice_context(i, i == 0, 0)));
    outs_b.push_back(session->run(frames(b, t0, sizes[i]), slice_context(i, i == 0, 1)));
    t0 += sizes[i];
  }
  EXPECT_LE(max_abs_diff(concat(outs_a), whole_a), 1e-5);
  EXPECT_LE(max_abs_diff(concat(outs_b), whole_b), 1e-5);
}

TEST_F(Wan21VaeSlicing, FirstSliceResetsState) {
  // A session reused for a second video gives the same result as a fresh one.
  const Planar input = golden_case("decode_t5").input;
  auto session = decoder_->open_session(wm::Device{});
  const Planar first = session->run(input.clone(), slice_context(0, true));
  const Planar again = session->run(input.clone(), slice_context(0, true));
  EXPECT_EQ(max_abs_diff(first, again), 0.0);
}

// --- decode tail tiles ----------------------------------------------------------------------

// A decoder (dim 16, random weights) built with ModelConfig::tuning = tuning.
std::unique_ptr<wm::Model> tuned_decoder(const std::string& tuning) {
  wm::ModelConfig config;
  config.kind = "wan2.1-vae";
  config.task = "decode";
  wm::edit_options<wm::models::Wan21VaeOptions>(config).dim = 16;
  config.tuning = tuning;
  return wm::models::make_wan21_vae_random(config, wm::Device{}, 11);
}

TEST(Wan21VaeTail, TilesAndChunksEqualWholeFrames) {
  // 5 latent frames of 14×18 → tail input 28×36 (halo 7): 2×3 tiles have real interior seams;
  // causal state per tile carries across the 3 + 2 latent-frame slices.
  Planar z(16, 5, 14, 18);
  uint32_t seed = 5;
  for (float& v : z.data) {
    seed = seed * 1664525u + 1013904223u;
    v = float(seed >> 8) / float(1 << 24) * 4.f - 2.f;
  }
  const Planar whole = run_slices(*tuned_decoder(""), z, {3, 2});
  ASSERT_EQ(whole.frames, 17);
  ASSERT_EQ(whole.height, 112);
  for (const std::string tuning :
       {"tail_tiles=2x3", "tail_tiles=2x3,tail_frames=3", "tail_tiles=1x4,tail_frames=2",
        "tail_tiles=3x1,host_state=1", "tail_tiles=2x3,host_state=1,tail_frames=3",
        "tail_tiles=1x1,host_state=1,tail_frames=5", "time_conv_frames=1",
        "time_conv_frames=3,tail_frames=4", "tail_tiles=4x4,host_state=1",
        // every block computing the whole crop (the halo not shrinking block by block)
        "tail_tiles=2x3,tile_shrink=0",
        "tail_tiles=2x3,host_state=1,tail_frames=3,tile_shrink=0"}) {
    const double err = max_abs_diff(run_slices(*tuned_decoder(tuning), z, {3, 2}), whole);
    std::cout << "[ tail     ] " << tuning << ": max diff " << err << "\n";
    EXPECT_LE(err, 1e-5) << tuning;
  }
}

TEST(Wan21VaeTail, AutoPlanFitsTheBudget) {
  // The full-size decoder's layout (no weights needed) at 1920×1080 output: tail input 270×480
  // (bf16-sized elements do not matter to the logic; the recorder's stats are float32 here).
  wm::ModelConfig config;
  config.kind = "wan2.1-vae";
  config.task = "decode";
  struct Zeros : wm::models::wan21::ParamSource {
    at::Tensor get(const std::string&, const std::vector<int64_t>& shape) override {
      return at::zeros(shape);
    }
  } zeros;
  const auto arch = wm::models::wan21::Architecture::from(config);
  const at::Tensor stat = at::ones({1, 16, 1, 1, 1});
  const wm::models::wan21::Network net(arch, wm::models::wan21::Task::kDecode, zeros, stat, stat,
                                       at::MemoryFormat::Contiguous);
  EXPECT_EQ(net.tail_scale(), 4);
  EXPECT_EQ(net.tail_halo(), 6);
  const int64_t frames = 16, h = 270, w = 480;
  using wm::models::wan21::TailPlan;
  const TailPlan roomy = net.auto_tail_plan(frames, h, w, int64_t(1) << 40);
  EXPECT_EQ(roomy.tiles(), 1);
  EXPECT_FALSE(roomy.host_state);
  EXPECT_EQ(roomy.frames, 16);
  const int64_t resident = net.tail_plan_bytes(TailPlan{1, 1, 1, false}, frames, h, w);
  int last_tiles = 1;
  for (double f : {0.9, 0.6, 0.4, 0.25, 0.15}) {
    const int64_t avail = int64_t(double(resident) * f);
    const TailPlan p = net.auto_tail_plan(frames, h, w, avail);
    std::cout << "[ plan     ] " << f << " of the one-tile need: " << p.str() << "\n";
    EXPECT_LE(net.tail_plan_bytes(p, frames, h, w), avail) << p.str();
    EXPECT_GE(p.tiles(), last_tiles);
    EXPECT_GE(p.frames, 1);
    const TailPlan more = net.more_tiles(p);  // the out-of-memory back-off's next grid
    EXPECT_GT(more.tiles(), p.tiles());
    EXPECT_TRUE(more.host_state);
    last_tiles = p.tiles();
  }
  EXPECT_GT(last_tiles, 1);
  EXPECT_TRUE(net.auto_tail_plan(frames, h, w, int64_t(double(resident) * 0.15)).host_state);

  // Tiles whose blocks compute only what later blocks read need less than tiles computing the
  // whole crop at every block: less state (7 of the 13 causal layers are at full resolution,
  // where the halo falls from 28 to 7..1 pixels) and smaller full-resolution activations.
  wm::models::wan21::Tuning whole_crop;
  whole_crop.tile_shrink = false;
  const wm::models::wan21::Network wide(arch, wm::models::wan21::Task::kDecode, zeros, stat, stat,
                                        at::MemoryFormat::Contiguous, whole_crop);
  for (const TailPlan& p : {TailPlan{8, 2, 3, true}, TailPlan{8, 3, 3, false}}) {
    const int64_t shrunk = net.tail_plan_bytes(p, frames, h, w);
    const int64_t whole = wide.tail_plan_bytes(p, frames, h, w);
    std::cout << "[ shrink   ] " << p.str() << ": " << shrunk << " bytes against " << whole << "\n";
    EXPECT_LT(shrunk, whole) << p.str();
  }
  // One tile has no seams: nothing to shrink.
  EXPECT_EQ(net.tail_plan_bytes(TailPlan{8, 1, 1, false}, frames, h, w),
            wide.tail_plan_bytes(TailPlan{8, 1, 1, false}, frames, h, w));
}

// --- traits and layout -----------------------------------------------------------------------

TEST(Wan21Vae, Traits) {
  auto dec = tiny_model("decode");
  const auto& d = dec->traits();
  EXPECT_EQ(d.in_channels, 16);
  EXPECT_EQ(d.out_channels, 3);
  EXPECT_EQ(d.scale_num, 8);
  EXPECT_EQ(d.scale_den, 1);
  EXPECT_TRUE(d.causal_state);
  EXPECT_FALSE(d.halo_exact);
  EXPECT_EQ(dec->output_frames(1), 1);
  EXPECT_EQ(dec->output_frames(21), 81);
  auto enc = tiny_model("encode");
  const auto& e = enc->traits();
  EXPECT_EQ(e.in_channels, 3);
  EXPECT_EQ(e.out_channels, 16);
  EXPECT_EQ(e.scale_den, 8);
  EXPECT_EQ(e.size_multiple, 8);
  EXPECT_EQ(e.frame_group, 4);
  EXPECT_EQ(e.frame_offset, 1);
  EXPECT_EQ(enc->output_frames(81), 21);
  EXPECT_EQ(enc->output_frames(1), 1);
}

TEST(Wan21Vae, LayoutMatchesOfficialCheckpoint) {
  wm::ModelConfig config;  // the defaults are the official dim=96 architecture
  config.kind = "wan2.1-vae";
  std::ifstream in(golden("keys_full_dim96.txt"));
  std::vector<std::string> expected;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) expected.push_back(line);
  }
  std::vector<std::string> got;
  for (const auto& p : wm::models::wan21_vae_layout(config)) {
    std::string shape;
    for (size_t i = 0; i < p.shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(p.shape[i]);
    got.push_back(p.key + "\t[" + shape + "]");
  }
  EXPECT_EQ(got, expected);
}

TEST(Wan21Vae, RandomWeightsAreDeterministic) {
  wm::ModelConfig config = tiny_config("decode");
  auto a = wm::models::make_wan21_vae_random(config, wm::Device{}, 7);
  auto b = wm::models::make_wan21_vae_random(config, wm::Device{}, 7);
  auto c = wm::models::make_wan21_vae_random(config, wm::Device{}, 8);
  Planar z(16, 2, 4, 4);
  for (size_t i = 0; i < z.data.size(); ++i) z.data[i] = float(i % 7) * 0.3f - 1.f;
  const Planar ya = a->open_session(wm::Device{})->run(z.clone(), slice_context(0, true));
  const Planar yb = b->open_session(wm::Device{})->run(z.clone(), slice_context(0, true));
  const Planar yc = c->open_session(wm::Device{})->run(z.clone(), slice_context(0, true));
  EXPECT_EQ(ya.frames, 5);
  EXPECT_EQ(ya.height, 32);
  EXPECT_EQ(max_abs_diff(ya, yb), 0.0);
  EXPECT_GT(max_abs_diff(ya, yc), 1e-3);
}

// --- weights files ---------------------------------------------------------------------------

// A weights file to modify: the golden tensors as editable entries.
struct EditableWeights {
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<char> data;
  };
  std::vector<Entry> entries;

  EditableWeights() {
    wm::io::SafetensorsFile file(golden("weights.safetensors"));
    for (const std::string& name : file.names()) {
      const auto& info = file.info(name);
      const char* p = static_cast<const char*>(info.data);
      entries.push_back({name, info.dtype, info.shape, std::vector<char>(p, p + info.bytes)});
    }
  }
  Entry& at(const std::string& name) {
    for (Entry& e : entries) {
      if (e.name == name) return e;
    }
    throw std::runtime_error("no entry " + name);
  }
  void erase(const std::string& name) {
    entries.erase(std::remove_if(entries.begin(), entries.end(),
                                 [&](const Entry& e) { return e.name == name; }),
                  entries.end());
  }
  // Stores every float32 tensor as `dtype` (F16 or BF16).
  void convert_all(const std::string& dtype) {
    for (Entry& e : entries) {
      at::Tensor t = at::from_blob(e.data.data(), {int64_t(e.data.size() / 4)}, at::kFloat)
                         .to(dtype == "F16" ? at::kHalf : at::kBFloat16);
      e.data.assign(static_cast<char*>(t.data_ptr()),
                    static_cast<char*>(t.data_ptr()) + t.numel() * t.element_size());
      e.dtype = dtype;
    }
  }
  void write(const std::string& path) const {
    std::vector<wm::io::TensorEntry> out;
    for (const Entry& e : entries)
      out.push_back({e.name, e.dtype, e.shape, e.data.data(), e.data.size()});
    wm::io::write_safetensors(path, out);
  }
};

class Wan21VaeWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("wm_wan21_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes `w` to a temp file and returns a decode config using it.
  wm::ModelConfig config_with(const EditableWeights& w, const std::string& task = "decode") {
    wm::ModelConfig config = tiny_config(task);
    config.weights = (dir_ / "weights.safetensors").string();
    w.write(config.weights);
    return config;
  }
  static void expect_load_error(const wm::ModelConfig& config,
                                std::initializer_list<std::string> parts) {
    expect_model_error([&] { wm::models::make_wan21_vae(config, wm::Device{}); }, parts);
  }
  fs::path dir_;
};

TEST_F(Wan21VaeWeights, MissingKey) {
  EditableWeights w;
  w.erase("decoder.upsamples.3.time_conv.weight");
  const auto config = config_with(w);
  expect_load_error(config,
                    {"weights.safetensors: missing key decoder.upsamples.3.time_conv.weight",
                     "(expected shape [128, 64, 3, 1, 1])"});
  // The encoder does not use the key: it loads.
  EXPECT_NO_THROW(wm::models::make_wan21_vae(config_with(w, "encode"), wm::Device{}));
}

TEST_F(Wan21VaeWeights, MisShapedKey) {
  EditableWeights w;
  auto& e = w.at("decoder.conv1.weight");  // [64, 16, 3, 3, 3] stored as [64, 16, 3, 9]
  e.shape = {64, 16, 3, 9};
  expect_load_error(config_with(w), {"weights.safetensors: decoder.conv1.weight: expected shape "
                                     "[64, 16, 3, 3, 3], file has [64, 16, 3, 9]"});
}

TEST_F(Wan21VaeWeights, MisShapedKeyOfTheOtherHalf) {
  EditableWeights w;
  w.at("encoder.head.2.bias").shape = {4, 8};  // 32 floats either way
  expect_load_error(config_with(w), {"encoder.head.2.bias: expected shape [32], file has [4, 8]"});
}

TEST_F(Wan21VaeWeights, UnexpectedKey) {
  EditableWeights w;
  w.entries.push_back({"decoder.upsamples.99.gamma", "F32", {1}, std::vector<char>(4, 0)});
  expect_load_error(config_with(w),
                    {"weights.safetensors: unexpected key decoder.upsamples.99.gamma"});
}

TEST_F(Wan21VaeWeights, DimMismatch) {
  wm::ModelConfig config = tiny_config("decode");
  wm::edit_options<wm::models::Wan21VaeOptions>(config).dim = 96;  // dim=16 weights
  expect_load_error(config, {"decoder.conv1.weight: expected shape [384, 16, 3, 3, 3], file has "
                             "[64, 16, 3, 3, 3]",
                             "model config dim=96", "more problems"});
}

TEST_F(Wan21VaeWeights, MissingFile) {
  wm::ModelConfig config = tiny_config("decode");
  config.weights = (dir_ / "absent.safetensors").string();
  try {
    wm::models::make_wan21_vae(config, wm::Device{});
    ADD_FAILURE() << "no error";
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(e.exit_code(), wm::kExitNoInput);
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(Wan21VaeWeights, HalfPrecisionFilesLoad) {
  GoldenCase g = golden_case("decode_t5");
  double scale = 0;
  for (float v : g.output.data) scale = std::max(scale, double(std::abs(v)));
  for (const char* dtype : {"F16", "BF16"}) {
    EditableWeights w;
    w.convert_all(dtype);
    auto model = wm::models::make_wan21_vae(config_with(w), wm::Device{});
    const Planar out =
        model->open_session(wm::Device{})->run(g.input.clone(), slice_context(0, true));
    const double err = max_abs_diff(out, g.output);
    EXPECT_LE(err, 0.05 * scale) << dtype;  // weights rounded to 8 or 11 significant bits
    EXPECT_GT(err, 0.0) << dtype;
  }
}

// --- input validation ------------------------------------------------------------------------

TEST(Wan21VaeInput, WrongChannelCount) {
  auto model = tiny_model("decode");
  auto session = model->open_session(wm::Device{});
  expect_model_error([&] { session->run(Planar(8, 2, 4, 4), slice_context(0, true)); },
                     {"wan2.1-vae decode: input has 8 channels, expected 16"});
}

TEST(Wan21VaeInput, EncodeFrameCounts) {
  auto model = tiny_model("encode");
  auto session = model->open_session(wm::Device{});
  expect_model_error([&] { session->run(Planar(3, 6, 16, 16), slice_context(0, true)); },
                     {"wan2.1-vae encode: the first slice has 6 frames; it needs 1 + 4k"});
  session->run(Planar(3, 5, 16, 16), slice_context(0, true));
  expect_model_error([&] { session->run(Planar(3, 3, 16, 16), slice_context(1, false)); },
                     {"slice 1 has 3 frames; later slices need a multiple of 4"});
  expect_model_error([&] { session->run(Planar(3, 5, 12, 16), slice_context(0, true)); },
                     {"frame size 16x12 is not a multiple of 8"});
}

TEST(Wan21VaeInput, LaterSliceWithoutFirst) {
  auto model = tiny_model("decode");
  auto session = model->open_session(wm::Device{});
  expect_model_error([&] { session->run(Planar(16, 2, 4, 4), slice_context(3, false, 2)); },
                     {"slice 3 of tile 2 is not the first slice"});
}

TEST(Wan21VaeConfig, BadConfigs) {
  wm::ModelConfig config = tiny_config("decode");
  config.task = "upscale";
  expect_model_error([&] { wm::models::make_wan21_vae(config, wm::Device{}); },
                     {"task must be decode or encode"});
  config = tiny_config("decode");
  wm::edit_options<wm::models::Wan21VaeOptions>(config).latent_mean = {0.0, 1.0};
  expect_model_error([&] { wm::models::make_wan21_vae(config, wm::Device{}); },
                     {"latent_mean has 2 values, z_dim is 16"});
  config = tiny_config("decode");
  wm::edit_options<wm::models::Wan21VaeOptions>(config).temporal_downsample = {true};
  expect_model_error([&] { wm::models::make_wan21_vae(config, wm::Device{}); },
                     {"temporal_downsample needs 3 entries"});
  config = tiny_config("decode");
  config.precision = wm::Precision::kFloat16;
  expect_model_error([&] { wm::models::make_wan21_vae(config, wm::Device{}); },
                     {"fp16 is not supported on CPU"});
}

// The tuning keys of cuDNN's search: plans timed per shape 5 unless asked (0 leaves LibTorch's
// own), read back from str() as every key is; a negative count or an unknown key is a ModelError.
TEST(Wan21VaeConfig, CudnnSearchTuningKeys) {
  namespace wan21 = wm::models::wan21;
  const wan21::Tuning d = wan21::Tuning::parse("");
  EXPECT_EQ(d.cudnn_benchmark_limit, 5);
  EXPECT_TRUE(d.cudnn_benchmark);
  const wan21::Tuning t = wan21::Tuning::parse("cudnn_benchmark_limit=0,cudnn_benchmark=0");
  EXPECT_EQ(t.cudnn_benchmark_limit, 0);
  EXPECT_FALSE(t.cudnn_benchmark);
  EXPECT_EQ(wan21::Tuning::parse(wan21::Tuning::parse("cudnn_benchmark_limit=8").str())
                .cudnn_benchmark_limit,
            8);
  EXPECT_THROW(wan21::Tuning::parse("cudnn_benchmark_limit=-1"), wm::ModelError);
  EXPECT_THROW(wan21::Tuning::parse("cudnn_benchmark_limit=x"), wm::ModelError);
  EXPECT_THROW(wan21::Tuning::parse("cudnn_limit=5"), wm::ModelError);
  // What str() writes reads back as the same tuning (the auto tail grid is 0x0).
  EXPECT_EQ(wan21::Tuning::parse(d.str()).str(), d.str());
  EXPECT_THROW(wan21::Tuning::parse("tail_tiles=0x2"), wm::ModelError);
}

// OutputOffload with a pool far smaller than a chunk: every chunk goes through in row pieces,
// lands exactly in its region (whole-width and cropped), nothing else of the destination is
// written, the staging never passes the pool, and more chunks than it may hold at once all land.
TEST(OutputOffload, ChunksLandInPiecesWithinThePool) {
  const int64_t pool = 4 * 256 * 4;  // 4 buffers of 256 floats
  wm::parallel::OutputOffload offload(pool, 4, /*max_chunks=*/2);
  Planar dst;
  offload.allocate(dst, 3, 10, 16, 32);
  std::vector<at::Tensor> chunks;
  struct Place {
    int first, top, left;
  };
  const std::vector<Place> places = {{0, 0, 0}, {2, 3, 5}, {4, 0, 0}, {6, 9, 20}, {8, 0, 0}};
  for (size_t i = 0; i < places.size(); ++i) {
    const bool whole = places[i].left == 0;
    const at::Tensor chunk = at::rand({3, whole ? 2 : 1, whole ? 16 : 7, whole ? 32 : 12});
    chunks.push_back(chunk);
    offload.push(chunk, dst, places[i].first, places[i].top, places[i].left);
  }
  offload.finish();
  EXPECT_LE(offload.staged_bytes(), pool);
  EXPECT_GT(offload.staged_bytes(), 0);
  EXPECT_GT(offload.pieces(), int64_t(places.size()) * 2);  // chunks took several pieces each
  ASSERT_EQ(dst.channels, 3);
  ASSERT_EQ(dst.frames, 10);
  at::Tensor expected = at::zeros({3, 10, 16, 32});
  for (size_t i = 0; i < places.size(); ++i) {
    const at::Tensor& c = chunks[i];
    expected.narrow(1, places[i].first, c.size(1))
        .narrow(2, places[i].top, c.size(2))
        .narrow(3, places[i].left, c.size(3))
        .copy_(c);
  }
  const at::Tensor got = at::from_blob(dst.data.data(), {3, 10, 16, 32}, at::kFloat);
  EXPECT_TRUE(at::equal(got, expected));
}

// Pieces of more than 1 Mi floats are copied into the destination by several threads, each a
// run of rows: whole rows and crops (a run may start mid-plane and cross planes) land where one
// thread would put them.
TEST(OutputOffload, LargePiecesCopiedInParallelLandInPlace) {
  wm::parallel::OutputOffload offload(int64_t(64) << 20);
  Planar dst;
  const int frames = 6, height = 300, width = 1000;
  offload.allocate(dst, 3, frames, height, width);
  // Whole rows: 3 × 4 × 300 rows of 1000 (3.6 Mi floats, ~1049 rows per thread's run, so runs
  // start inside planes); a crop: 3 × 2 × 290 rows of 990 at (10, 7).
  const at::Tensor whole = at::rand({3, 4, height, width});
  const at::Tensor crop = at::rand({3, 2, height - 10, width - 10});
  offload.push(whole, dst, 0, 0, 0);
  offload.push(crop, dst, 4, 10, 7);
  offload.finish();
  at::Tensor expected = at::zeros({3, frames, height, width});
  expected.narrow(1, 0, 4).copy_(whole);
  expected.narrow(1, 4, 2).narrow(2, 10, height - 10).narrow(3, 7, width - 10).copy_(crop);
  const at::Tensor got = at::from_blob(dst.data.data(), {3, frames, height, width}, at::kFloat);
  EXPECT_TRUE(at::equal(got, expected));
}

// A chunk that does not fit its destination fails at finish() (not later, not silently), and
// the offload works again afterwards.
TEST(OutputOffload, ChunkOutsideItsDestinationFailsAtFinish) {
  wm::parallel::OutputOffload offload(1 << 20);
  Planar dst(3, 2, 8, 8);
  offload.push(at::ones({3, 2, 8, 8}), dst, /*first_frame=*/1);
  EXPECT_THROW(offload.finish(), wm::ModelError);
  offload.push(at::ones({3, 2, 8, 8}), dst, 0);
  offload.finish();
  EXPECT_EQ(dst.data.front(), 1.0f);
  EXPECT_EQ(dst.data.back(), 1.0f);
  EXPECT_THROW(offload.push(at::ones({3, 2, 8, 8}, at::kDouble), dst, 0), wm::ModelError);
}

// A mark covers what was allocated and pushed before it: after an error in later work (abandon),
// the marked slice still lands whole and its Completion reports no error; a deferred output
// hands that slice over; a chunk that fails before a mark is reported by that mark, once.
TEST(OutputOffload, MarkedWorkLandsWhenLaterWorkIsAbandoned) {
  wm::parallel::OutputOffload offload(4 * 256 * 4, 4, /*max_chunks=*/2);
  auto first = std::make_shared<Planar>();
  offload.allocate(*first, 2, 4, 16, 32);
  const at::Tensor a = at::rand({2, 2, 16, 32}), b = at::rand({2, 2, 16, 32});
  offload.push(a, *first, 0);
  offload.push(b, *first, 2);
  std::function<Planar()> deferred = wm::exec::deferred_output(first, offload.mark());
  Planar second;
  offload.allocate(second, 2, 2, 16, 32);
  offload.push(at::rand({2, 2, 16, 32}), second, 0);
  offload.abandon();  // the second slice failed
  const Planar got = deferred();
  ASSERT_EQ(got.frames, 4);
  const at::Tensor t =
      at::from_blob(const_cast<float*>(got.data.data()), {2, 4, 16, 32}, at::kFloat);
  EXPECT_TRUE(at::equal(t, at::cat({a, b}, 1)));

  Planar bad(3, 2, 8, 8);
  offload.push(at::ones({3, 2, 8, 8}), bad, /*first_frame=*/1);  // does not fit
  const std::shared_ptr<wm::exec::Completion> mark = offload.mark();
  EXPECT_THROW(mark->wait(), wm::ModelError);
  EXPECT_NO_THROW(offload.finish());        // reported once, by the mark
  EXPECT_NO_THROW(offload.mark()->wait());  // nothing open: done at once
}

TEST(InputStaging, CpuUploadIsACopy) {
  Planar in(2, 3, 4, 5);
  for (size_t i = 0; i < in.data.size(); ++i) in.data[i] = float(i);
  wm::parallel::InputStaging staging(1 << 20);
  const at::Tensor t = staging.upload(in, at::kCPU);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  in.data[7] = -1.0f;  // not a view of the Planar
  EXPECT_EQ(t.flatten()[7].item<float>(), 7.0f);
  EXPECT_EQ(t.flatten()[119].item<float>(), 119.0f);
}

}  // namespace
