// SeedVR2 VAE at the model interface: the official key layout, golden vectors (float64 reference
// of the upstream code, tiny random-weight model with the official structure), exact causal
// slicing, the checks on weights and inputs. The same data through whole wmbatch jobs:
// tests/integration/test_seedvr2_jobs.cpp.
#include "src/models/seedvr2/seedvr2_vae.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/models/seedvr2/seedvr2_layout.h"
#include "src/models/seedvr2/torch/seedvr2_blocks.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/planar_ops.h"

using wm::Planar;
using wm::RunContext;
namespace seedvr2 = wm::models::seedvr2;

namespace {

using wm::test::concat;
using wm::test::frames;
using wm::test::max_abs_diff;
using wm::test::read_planar;

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/";

nlohmann::json meta() {
  std::ifstream in(kGolden + "meta.json");
  return nlohmann::json::parse(in);
}

wm::ModelConfig tiny_config(const std::string& task, const std::string& weights = "") {
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = task;
  config.weights = weights.empty() ? kGolden + "weights.safetensors" : weights;
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).norm_groups =
      meta().at("config").at("norm_num_groups").get<int>();
  return config;
}

Planar golden(const std::string& name, const std::string& tensor) {
  return read_planar(kGolden + name + ".safetensors", tensor);
}

// Runs `input` through a fresh session in slices of the given frame counts.
Planar run_sliced(const wm::Model& model, const Planar& input, const std::vector<int>& sizes) {
  auto session = model.open_session(wm::Device{});
  std::vector<Planar> outs;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.last_slice = i + 1 == sizes.size();
    outs.push_back(session->run(frames(input, t0, sizes[i]), ctx));
    t0 += sizes[i];
  }
  EXPECT_EQ(t0, input.frames);
  return concat(outs);
}

// --- layout ------------------------------------------------------------------------------------

TEST(SeedVR2Layout, OfficialArchitectureIsTheReleasedKeyList) {
  std::ifstream in(kGolden + "keys_full.txt");
  ASSERT_TRUE(in) << "keys_full.txt";
  std::vector<std::pair<std::string, std::string>> want;
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    want.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  const auto specs = seedvr2::layout(seedvr2::Architecture{});
  ASSERT_EQ(specs.size(), want.size());
  int64_t params = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string shape = "[";
    int64_t n = 1;
    for (size_t d = 0; d < specs[i].shape.size(); ++d) {
      shape += (d ? ", " : "") + std::to_string(specs[i].shape[d]);
      n *= specs[i].shape[d];
    }
    shape += "]";
    params += n;
    EXPECT_EQ(specs[i].key, want[i].first) << i;
    EXPECT_EQ(shape, want[i].second) << specs[i].key;
    EXPECT_EQ(specs[i].decoder, specs[i].key.rfind("decoder.", 0) == 0) << specs[i].key;
  }
  EXPECT_EQ(params, meta().at("keys_full").at("parameters").get<int64_t>());
}

TEST(SeedVR2Layout, WidthsAreReadFromTheCheckpointShapes) {
  wm::io::SafetensorsFile file(kGolden + "weights.safetensors");
  auto shape_of = [&](const std::string& key) -> const std::vector<int64_t>* {
    return file.has(key) ? &file.info(key).shape : nullptr;
  };
  for (bool decoder : {false, true}) {
    const seedvr2::Architecture arch = seedvr2::infer_architecture(shape_of, decoder, 4);
    EXPECT_EQ(arch.channels,
              meta().at("config").at("block_out_channels").get<std::vector<int64_t>>());
    EXPECT_EQ(arch.latent_channels, 16);
    // The inferred layout is exactly the file's key set.
    const auto specs = seedvr2::layout(arch);
    EXPECT_EQ(specs.size(), file.names().size());
    for (const auto& s : specs) {
      ASSERT_TRUE(file.has(s.key)) << s.key;
      EXPECT_EQ(file.info(s.key).shape, s.shape) << s.key;
    }
  }
}

// --- golden vectors ----------------------------------------------------------------------------

TEST(SeedVR2Golden, DecodeCasesMatchTheReference) {
  auto model = wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{});
  for (const char* name : {"decode_t1", "decode_t3", "decode_t5"}) {
    const Planar z = golden(name, "latent");
    const Planar want = golden(name, "video");
    EXPECT_EQ(model->output_frames(z.frames), want.frames);
    const Planar got = run_sliced(*model, z, {z.frames});
    const double err = max_abs_diff(got, want);
    std::cout << "[ golden   ] " << name << " max abs error " << err << "\n";
    EXPECT_LE(err, 1e-4) << name;
  }
}

TEST(SeedVR2Golden, EncodeCasesMatchTheReference) {
  wm::ModelConfig config = tiny_config("encode");
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).logvar = true;
  auto model = wm::models::make_seedvr2_vae(config, wm::Device{});
  EXPECT_EQ(model->traits().out_channels, 32);
  for (const char* name : {"encode_t9", "encode_t17"}) {
    const Planar video = golden(name, "video");
    const Planar mean = golden(name, "latent_mean");
    const Planar logvar = golden(name, "latent_logvar");
    const Planar got = run_sliced(*model, video, {video.frames});
    ASSERT_EQ(got.channels, 32);
    const double err_mean = max_abs_diff(frames(got, 0, got.frames, 0, 16), mean);
    const double err_logvar = max_abs_diff(frames(got, 0, got.frames, 16, 16), logvar);
    std::cout << "[ golden   ] " << name << " max abs error mean " << err_mean << ", logvar "
              << err_logvar << "\n";
    EXPECT_LE(err_mean, 1e-4) << name;
    EXPECT_LE(err_logvar, 1e-4) << name;
  }
}

// The channels-last layout (what CUDA runs) computes the same on the CPU: its GroupNorm over
// frames folded into the batch and its Upsample3D unpacking are other code than the default's.
// (Which layout each CPU conv returns is LibTorch's choice; the network re-lays where it must.)
TEST(SeedVR2Golden, ChannelsLastLayoutMatchesTheReference) {
  wm::io::SafetensorsFile weights(kGolden + "weights.safetensors");
  auto getter = [&](const std::string& key) {
    const auto& info = weights.info(key);
    at::Tensor t = at::empty(info.shape, at::kFloat);
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    return t.dim() == 5 ? t.contiguous(at::MemoryFormat::ChannelsLast3d) : t;
  };
  seedvr2::Architecture arch;
  arch.channels = {16, 32, 64, 64};
  arch.norm_groups = 4;
  auto tensor = [](const Planar& p) {
    return at::from_blob(const_cast<float*>(p.data.data()),
                         {1, p.channels, p.frames, p.height, p.width}, at::kFloat)
        .clone();
  };
  auto max_diff = [](const at::Tensor& got, const Planar& want) {
    EXPECT_EQ(got.size(2), want.frames);
    const at::Tensor w =
        at::from_blob(const_cast<float*>(want.data.data()),
                      {1, want.channels, want.frames, want.height, want.width}, at::kFloat);
    return (got.contiguous() - w).abs().max().item<double>();
  };
  const at::MemoryFormat cl = at::MemoryFormat::ChannelsLast3d;
  {
    const seedvr2::Network decoder(arch, true, getter, cl);
    seedvr2::StreamState state;
    const at::Tensor video = decoder.forward(tensor(golden("decode_t3", "latent")), state, true);
    EXPECT_LE(max_diff(video, golden("decode_t3", "video")), 1e-4);
  }
  {
    const seedvr2::Network encoder(arch, false, getter, cl);
    seedvr2::StreamState state;
    const at::Tensor latent = encoder.forward(tensor(golden("encode_t9", "video")), state, true);
    EXPECT_LE(max_diff(latent.narrow(1, 0, 16), golden("encode_t9", "latent_mean")), 1e-4);
  }
}

// The stage-by-stage path with time chunks (what CUDA runs, sized from the memory budget): a
// budget of one byte cuts every stage's input into single frames (a temporal downsampler: whole
// windows), each taken through all later stages; the chunks together equal the whole pass.
TEST(SeedVR2Slicing, TimeChunksInsideASliceEqualTheWholePass) {
  wm::io::SafetensorsFile weights(kGolden + "weights.safetensors");
  auto getter = [&](const std::string& key) {
    const auto& info = weights.info(key);
    at::Tensor t = at::empty(info.shape, at::kFloat);
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    return t.dim() == 5 ? t.contiguous(at::MemoryFormat::ChannelsLast3d) : t;
  };
  seedvr2::Architecture arch;
  arch.channels = {16, 32, 64, 64};
  arch.norm_groups = 4;
  auto tensor = [](const Planar& p) {
    return at::from_blob(const_cast<float*>(p.data.data()),
                         {1, p.channels, p.frames, p.height, p.width}, at::kFloat)
        .clone();
  };
  for (bool decoder : {true, false}) {
    const seedvr2::Network net(arch, decoder, getter, at::MemoryFormat::ChannelsLast3d);
    const at::Tensor x =
        decoder ? tensor(golden("decode_t3", "latent")) : tensor(golden("encode_t9", "video"));
    seedvr2::StreamState whole_state;
    const at::Tensor whole = net.forward(x, whole_state, true);
    seedvr2::StreamState state;
    std::vector<at::Tensor> parts;
    net.forward_chunks(x, state, true, 1, [&](const at::Tensor& y) { parts.push_back(y); });
    // One output frame per chunk: every stage was cut.
    EXPECT_EQ(int64_t(parts.size()), whole.size(2));
    const at::Tensor got = at::cat(parts, 2);
    ASSERT_EQ(got.sizes(), whole.sizes());
    const double err = (got - whole).abs().max().item<double>();
    std::cout << "[ chunks   ] " << (decoder ? "decode" : "encode") << ": " << parts.size()
              << " chunks, max abs difference " << err << "\n";
    EXPECT_LE(err, 1e-5);
    if (decoder) continue;
    // Budgets between one byte and the whole pass: the early stages run chunks of any length,
    // and each temporal downsampler gathers them into whole stride windows until its own chunk
    // fills the budget (so the chunks after it are larger than the ones before).
    std::set<size_t> counts;
    for (int64_t budget :
         {int64_t(1) << 16, int64_t(1) << 19, int64_t(3) << 19, int64_t(1) << 21}) {
      seedvr2::StreamState s;
      std::vector<at::Tensor> out;
      net.forward_chunks(x, s, true, budget, [&](const at::Tensor& y) { out.push_back(y); });
      const double e = (at::cat(out, 2) - whole).abs().max().item<double>();
      std::cout << "[ chunks   ] encode, budget " << budget << " B: " << out.size()
                << " chunks, max abs difference " << e << "\n";
      EXPECT_LE(e, 1e-5) << budget;
      counts.insert(out.size());
    }
    EXPECT_GE(counts.size(), 2u);  // the budgets cut differently
  }
}

// --- causal slicing ----------------------------------------------------------------------------

TEST(SeedVR2Slicing, DecodeSlicesOfAnyLengthEqualTheWholeSequence) {
  auto model = wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{});
  const Planar z = golden("decode_t5", "latent");
  const Planar whole = run_sliced(*model, z, {5});
  // Even and uneven slices, a first slice without a partner frame, and the official pipeline's
  // cut (a first slice of 1 + 1 latent frames, then 1 at a time).
  const std::vector<std::vector<int>> plans = {{1, 1, 1, 1, 1}, {2, 2, 1}, {3, 2},
                                               {2, 1, 1, 1},    {1, 3, 1}, {4, 1}};
  for (const auto& sizes : plans) {
    const double err = max_abs_diff(run_sliced(*model, z, sizes), whole);
    std::stringstream name;
    for (int s : sizes) name << s << " ";
    std::cout << "[ sliced   ] decode_t5 slices " << name.str() << "max abs diff " << err << "\n";
    EXPECT_LE(err, 1e-5) << name.str();
  }
}

TEST(SeedVR2Slicing, EncodeSlicesOfWholeGroupsEqualTheWholeSequence) {
  wm::ModelConfig config = tiny_config("encode");
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).logvar = true;
  auto model = wm::models::make_seedvr2_vae(config, wm::Device{});
  const Planar video = golden("encode_t17", "video");
  const Planar whole = run_sliced(*model, video, {17});
  for (const auto& sizes :
       std::vector<std::vector<int>>{{5, 4, 4, 4}, {9, 8}, {1, 8, 8}, {5, 12}, {1, 4, 8, 4}}) {
    const double err = max_abs_diff(run_sliced(*model, video, sizes), whole);
    EXPECT_LE(err, 1e-5) << sizes.size() << " slices";
  }
}

TEST(SeedVR2Slicing, EncodeRefusesSlicesOffTheGroupBoundary) {
  auto model = wm::models::make_seedvr2_vae(tiny_config("encode"), wm::Device{});
  const Planar video = golden("encode_t9", "video");
  auto session = model->open_session(wm::Device{});
  RunContext first;
  EXPECT_THROW(session->run(frames(video, 0, 7), first), wm::ModelError);
  session->run(frames(video, 0, 1), first);
  RunContext later;
  later.first_slice = false;
  later.slice_index = 1;
  try {
    session->run(frames(video, 1, 6), later);
    FAIL() << "6 frames after the first were accepted";
  } catch (const wm::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 4"), std::string::npos) << e.what();
  }
}

// Tiles of one sequence keep separate state: interleaving two tiles' slices gives each tile's
// own whole-sequence result.
TEST(SeedVR2Slicing, TilesKeepTheirOwnState) {
  auto model = wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{});
  const Planar a = frames(golden("decode_t3", "latent"), 0, 2);
  const Planar b = frames(golden("decode_t5", "latent"), 0, 2);
  const Planar whole_a = run_sliced(*model, a, {2});
  const Planar whole_b = run_sliced(*model, b, {2});
  auto session = model->open_session(wm::Device{});
  std::vector<Planar> out_a, out_b;
  for (int t = 0; t < 2; ++t) {
    RunContext ctx;
    ctx.slice_index = t;
    ctx.first_slice = t == 0;
    ctx.tiles = 2;
    ctx.tile_index = 0;
    out_a.push_back(session->run(frames(a, t, 1), ctx));
    ctx.tile_index = 1;
    out_b.push_back(session->run(frames(b, t, 1), ctx));
  }
  EXPECT_LE(max_abs_diff(concat(out_a), whole_a), 1e-5);
  EXPECT_LE(max_abs_diff(concat(out_b), whole_b), 1e-5);
}

// --- weights and inputs ------------------------------------------------------------------------

// A copy of the golden weights with `edit` applied to the tensor list.
std::string edited_weights(wm::test::TempDir& dir, const std::string& drop,
                           const std::string& reshape) {
  wm::io::SafetensorsFile file(kGolden + "weights.safetensors");
  std::vector<wm::io::TensorEntry> entries;
  std::vector<std::vector<char>> keep;
  for (const std::string& name : file.names()) {
    if (name == drop) continue;
    const auto& info = file.info(name);
    wm::io::TensorEntry e{name, info.dtype, info.shape, info.data, info.bytes};
    if (name == reshape) {
      // Same number of elements, another shape: [out, in, 3, 3, 3] → [in, out, 3, 3, 3].
      std::swap(e.shape[0], e.shape[1]);
    }
    entries.push_back(e);
  }
  const std::string path = dir.file("weights.safetensors");
  wm::io::write_safetensors(path, entries);
  return path;
}

TEST(SeedVR2Weights, MissingOrMisShapedKeysAreNamed) {
  wm::test::TempDir dir("seedvr2-weights");
  struct Case {
    std::string task, drop, reshape, expect;
  };
  const std::vector<Case> cases = {
      {"decode", "decoder.up_blocks.1.resnets.2.conv1.weight", "",
       "missing key decoder.up_blocks.1.resnets.2.conv1.weight"},
      {"encode", "encoder.mid_block.attentions.0.to_k.bias", "",
       "missing key encoder.mid_block.attentions.0.to_k.bias"},
      {"decode", "", "decoder.up_blocks.2.resnets.0.conv1.weight",
       "decoder.up_blocks.2.resnets.0.conv1.weight: expected shape [32, 64, 3, 3, 3], file has "
       "[64, 32, 3, 3, 3]"},
      // The other half's keys must be shaped right too.
      {"decode", "", "encoder.down_blocks.1.resnets.0.conv1.weight",
       "encoder.down_blocks.1.resnets.0.conv1.weight: expected shape"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    const std::string path = edited_weights(dir, c.drop, c.reshape);
    try {
      wm::models::make_seedvr2_vae(tiny_config(c.task, path), wm::Device{});
      FAIL() << "accepted";
    } catch (const wm::ModelError& e) {
      EXPECT_EQ(e.exit_code(), 65);
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  // The encoder does not need the decoder's keys (and the other way round).
  EXPECT_NO_THROW(wm::models::make_seedvr2_vae(
      tiny_config("encode", edited_weights(dir, "decoder.conv_out.bias", "")), wm::Device{}));
}

TEST(SeedVR2Weights, NormGroupsMustDivideTheWidths) {
  wm::ModelConfig config = tiny_config("decode");
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).norm_groups =
      32;  // the official count: the tiny model's 16 channels do not split so
  try {
    wm::models::make_seedvr2_vae(config, wm::Device{});
    FAIL() << "accepted";
  } catch (const wm::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("norm_groups 32"), std::string::npos) << e.what();
  }
}

TEST(SeedVR2Weights, RandomModelsHaveTheOfficialShapes) {
  // A small random model runs (the benchmark's path) and decodes to the expected sizes.
  seedvr2::Architecture arch;
  arch.channels = {8, 16, 16, 16};
  arch.norm_groups = 4;
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = "decode";
  auto model = wm::models::make_seedvr2_vae_random(config, arch, wm::Device{}, 7);
  Planar z(16, 2, 4, 6);
  for (size_t i = 0; i < z.data.size(); ++i) z.data[i] = float(std::sin(double(i)));
  const Planar out = run_sliced(*model, z, {2});
  EXPECT_EQ(out.channels, 3);
  EXPECT_EQ(out.frames, 5);
  EXPECT_EQ(out.height, 32);
  EXPECT_EQ(out.width, 48);
  for (float v : out.data) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace

// --- the release .pth (torch.save zip) --------------------------------------------------------

namespace {

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
}

// A zip of stored entries, as torch.save writes them (no CRCs: the reader does not need them).
std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, dir;
  for (const auto& [name, data] : entries) {
    const size_t offset = out.size();
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2), put_le(out, 0, 2), put_le(out, 0, 2), put_le(out, 0, 4);
    put_le(out, 0, 4), put_le(out, data.size(), 4), put_le(out, data.size(), 4);
    put_le(out, name.size(), 2), put_le(out, 0, 2);
    out += name + data;
    put_le(dir, 0x02014b50, 4);
    put_le(dir, 20, 2), put_le(dir, 20, 2), put_le(dir, 0, 2), put_le(dir, 0, 2);
    put_le(dir, 0, 4), put_le(dir, 0, 4), put_le(dir, data.size(), 4);
    put_le(dir, data.size(), 4), put_le(dir, name.size(), 2), put_le(dir, 0, 2);
    put_le(dir, 0, 2), put_le(dir, 0, 2), put_le(dir, 0, 2), put_le(dir, 0, 4);
    put_le(dir, offset, 4);
    dir += name;
  }
  const size_t dir_offset = out.size();
  out += dir;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2), put_le(out, 0, 2), put_le(out, entries.size(), 2);
  put_le(out, entries.size(), 2), put_le(out, dir.size(), 4), put_le(out, dir_offset, 4);
  put_le(out, 0, 2);
  return out;
}

// The golden safetensors weights as torch.save(state_dict) writes them: a protocol-2 pickle of
// an OrderedDict of _rebuild_tensor_v2 calls, one storage entry per tensor; `drop` left out.
std::string golden_as_pth(const std::string& drop = "") {
  wm::io::SafetensorsFile file(kGolden + "weights.safetensors");
  auto str = [](const std::string& v) {
    std::string p = "X";
    put_le(p, v.size(), 4);
    return p + v;
  };
  auto integer = [](int64_t v) {
    std::string p = "J";
    put_le(p, uint64_t(v), 4);
    return p;
  };
  std::string pkl =
      "\x80\x02"
      "ccollections\nOrderedDict\n)R";
  std::vector<std::pair<std::string, std::string>> entries;
  int index = 0;
  for (const std::string& name : file.names()) {
    if (name == drop) continue;
    const auto& info = file.info(name);
    EXPECT_EQ(info.dtype, "F32");
    const std::string key = std::to_string(index++);
    int64_t numel = 1;
    for (int64_t d : info.shape) numel *= d;
    pkl += str(name) + "ctorch._utils\n_rebuild_tensor_v2\n(";
    pkl += "(" + str("storage") + "ctorch\nFloatStorage\n" + str(key) + str("cpu") +
           integer(numel) + "tQ";
    pkl += integer(0) + "(";
    for (int64_t d : info.shape) pkl += integer(d);
    pkl += "t(";
    int64_t stride = 1;
    std::vector<int64_t> strides(info.shape.size());
    for (size_t i = info.shape.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= info.shape[i];
    }
    for (int64_t st : strides) pkl += integer(st);
    pkl +=
        "t\x89"
        "ccollections\nOrderedDict\n)RtRs";
    entries.push_back(
        {"archive/data/" + key, std::string(static_cast<const char*>(info.data), info.bytes)});
  }
  pkl += ".";
  entries.insert(entries.begin(), {"archive/data.pkl", pkl});
  entries.push_back({"archive/version", "3\n"});
  return stored_zip(entries);
}

}  // namespace

// The release checkpoint format loads through the safe pickle reader and decodes exactly as the
// safetensors copy of the same weights; a missing key is named as for safetensors.
TEST(SeedVR2Weights, ReleasePthLoadsLikeSafetensors) {
  wm::test::TempDir dir("seedvr2-pth");
  const std::string path = dir.file("ema_vae.pth");
  std::ofstream(path, std::ios::binary) << golden_as_pth();
  const Planar z = golden("decode_t1", "latent");
  const Planar from_pth =
      run_sliced(*wm::models::make_seedvr2_vae(tiny_config("decode", path), wm::Device{}), z, {1});
  const Planar from_st =
      run_sliced(*wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{}), z, {1});
  EXPECT_EQ(max_abs_diff(from_pth, from_st), 0.0);

  const std::string bad = dir.file("missing.pth");
  std::ofstream(bad, std::ios::binary) << golden_as_pth("decoder.conv_out.bias");
  try {
    wm::models::make_seedvr2_vae(tiny_config("decode", bad), wm::Device{});
    ADD_FAILURE() << "a checkpoint without decoder.conv_out.bias loaded";
  } catch (const wm::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("missing key decoder.conv_out.bias"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("missing.pth"), std::string::npos) << e.what();
  }
}
