// SeedVR2's DiT at its own interface: the official key layouts (3B and 7B), the architecture read
// from a file, the window geometry of every golden case, the checks on weights files, and the
// golden vectors (float64 reference of the upstream code, tiny random-weight 3B) with every
// intermediate. The same data through wmbatch jobs:
// tests/integration/test_seedvr2_upscale_jobs.cpp.
#include "src/models/seedvr2/torch/seedvr2_dit.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/models/seedvr2/seedvr2_dit_layout.h"
#include "src/models/torch/weights_file.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"

namespace seedvr2 = wm::models::seedvr2;
using wm::models::WeightsFile;

namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-dit-tiny/";

nlohmann::json meta() {
  std::ifstream in(kGolden + "meta.json");
  return nlohmann::json::parse(in);
}

// "name\t[a, b]" lines of a key list.
std::vector<std::pair<std::string, std::string>> key_list(const std::string& file) {
  std::ifstream in(kGolden + file);
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& s) { return wm::models::shape_text(s); }

seedvr2::ShapeOf shapes(const WeightsFile& file) {
  return [&file](const std::string& key) -> const std::vector<int64_t>* {
    const wm::io::TensorInfo* t = file.find(key);
    return t ? &t->shape : nullptr;
  };
}

at::Tensor read(const WeightsFile& file, const std::string& name) {
  const wm::io::TensorInfo* t = file.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? wm::models::host_tensor(*t) : at::Tensor();
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble).reshape(b.sizes()) - b.to(at::kDouble)).abs().max().item<double>();
}

std::unique_ptr<seedvr2::DitNetwork> golden_network() {
  const WeightsFile file(kGolden + "weights.safetensors");
  const seedvr2::DitArchitecture arch = seedvr2::infer_dit_architecture(shapes(file), 0);
  seedvr2::DitParams params;
  for (const auto& [key, info] : file.tensors()) params[key] = wm::models::host_tensor(info);
  return std::make_unique<seedvr2::DitNetwork>(arch, params, seedvr2::DitOptions{});
}

// --- layout ------------------------------------------------------------------------------------

// dit_layout(arch) is the key list `file` (names, order, shapes) with `parameters` in all.
void expect_key_list(const seedvr2::DitArchitecture& arch, const std::string& file,
                     int64_t parameters) {
  const auto want = key_list(file);
  const auto got = seedvr2::dit_layout(arch);
  ASSERT_EQ(got.size(), want.size()) << file;
  int64_t total = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].first) << file << " " << i;
    EXPECT_EQ(shape_text(got[i].shape), want[i].second) << got[i].key;
    int64_t n = 1;
    for (int64_t d : got[i].shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, parameters) << file;
}

TEST(SeedVR2DitLayout, Official3BAnd7BAreTheReleasedKeyLists) {
  const nlohmann::json keys = meta().at("keys_full");
  expect_key_list(seedvr2::DitArchitecture::official_3b(), "keys_full.txt",
                  keys.at("parameters").get<int64_t>());
  expect_key_list(seedvr2::DitArchitecture::official_7b(), "keys_full_7b.txt",
                  keys.at("parameters_7b").get<int64_t>());
}

TEST(SeedVR2DitLayout, ArchitectureIsReadFromTheKeyLists) {
  for (const char* file : {"keys_full.txt", "keys_full_7b.txt"}) {
    std::map<std::string, std::vector<int64_t>> table;
    for (const auto& [key, shape] : key_list(file)) {
      std::vector<int64_t> dims;
      std::stringstream in(shape.substr(1, shape.size() - 2));
      for (std::string d; std::getline(in, d, ',');) dims.push_back(std::stoll(d));
      table[key] = dims;
    }
    const seedvr2::DitArchitecture a = seedvr2::infer_dit_architecture(
        [&](const std::string& k) -> const std::vector<int64_t>* {
          const auto it = table.find(k);
          return it == table.end() ? nullptr : &it->second;
        },
        0);
    const seedvr2::DitArchitecture want = std::string(file) == "keys_full.txt"
                                              ? seedvr2::DitArchitecture::official_3b()
                                              : seedvr2::DitArchitecture::official_7b();
    EXPECT_EQ(a.str(), want.str()) << file;
    EXPECT_EQ(a.rope_freqs, want.rope_freqs) << file;
    EXPECT_EQ(a.mm_layers, want.mm_layers) << file;
  }
}

TEST(SeedVR2DitLayout, TinyGoldenArchitecture) {
  const WeightsFile file(kGolden + "weights.safetensors");
  const seedvr2::DitArchitecture a = seedvr2::infer_dit_architecture(shapes(file), 0);
  const nlohmann::json c = meta().at("config");
  EXPECT_EQ(a.variant, seedvr2::DitVariant::k3B);
  EXPECT_EQ(a.dim, c.at("vid_dim").get<int>());
  EXPECT_EQ(a.heads, c.at("heads").get<int>());
  EXPECT_EQ(a.head_dim, c.at("head_dim").get<int>());
  EXPECT_EQ(a.layers, c.at("num_layers").get<int>());
  EXPECT_EQ(a.mm_layers, c.at("mm_layers").get<int>());
  EXPECT_EQ(a.txt_in_dim, c.at("txt_in_dim").get<int>());
  EXPECT_EQ(a.rope_axis(), c.at("rope_dim").get<int>() / 3);
  EXPECT_EQ(a.mlp_hidden, 256);
  EXPECT_EQ(dit_layout(a).size(), file.tensors().size());
  // The buffers in the file are what the code computes.
  const at::Tensor freqs = read(file, "blocks.0.attn.rope.rope.freqs");
  EXPECT_TRUE(at::equal(freqs, seedvr2::dit_rope_freqs(a)));
}

// Every golden case's windows (meta.json lists them per case), regular and shifted.
TEST(SeedVR2DitLayout, WindowsOfEveryGoldenCase) {
  const nlohmann::json cases = meta().at("cases");
  int checked = 0;
  for (const auto& [name, c] : cases.items()) {
    std::vector<int> grid;
    if (c.contains("token_grid_thw")) {
      grid = c.at("token_grid_thw").get<std::vector<int>>();
    } else {
      const auto l = c.at("latent_thw").get<std::vector<int>>();
      grid = {l[0], l[1] / 2, l[2] / 2};
    }
    const auto size = seedvr2::dit_window_size(grid[0], grid[1], grid[2]);
    EXPECT_EQ(std::vector<int>(size.begin(), size.end()),
              c.at("windows").at("window_size_thw").get<std::vector<int>>())
        << name;
    for (const bool shifted : {false, true}) {
      const auto got = seedvr2::dit_windows(grid[0], grid[1], grid[2], shifted);
      const nlohmann::json& want = c.at("windows").at(shifted ? "shifted" : "regular");
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        const seedvr2::TokenRange r[3] = {got[i].t, got[i].h, got[i].w};
        for (int axis = 0; axis < 3; ++axis) {
          EXPECT_EQ(r[axis].begin, want[i][axis][0].get<int>()) << name << " window " << i;
          EXPECT_EQ(r[axis].end, want[i][axis][1].get<int>()) << name << " window " << i;
        }
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(SeedVR2DitLayout, WindowsAt720pAnd1080p) {
  // 720×1280 output: 45 × 80 tokens, 3 × 3 windows of 15 × 27; 1072×1920: 67 × 120, 5 × 5.
  EXPECT_EQ(seedvr2::dit_window_size(6, 45, 80), (std::array<int, 3>{2, 15, 27}));
  EXPECT_EQ(seedvr2::dit_windows(6, 45, 80, false).size(), 3u * 3u * 3u);
  EXPECT_EQ(seedvr2::dit_window_size(6, 67, 120), (std::array<int, 3>{2, 15, 27}));
  EXPECT_EQ(seedvr2::dit_windows(1, 67, 120, false).size(), 5u * 5u);
  // Shifted: a half window first, then full ones, then the rest.
  const auto r = seedvr2::dit_window_ranges(45, 15, true);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].end, 7);
  EXPECT_EQ(r[3].begin, 37);
}

// --- weights files -----------------------------------------------------------------------------

TEST(SeedVR2DitWeights, WrongOrTruncatedFileIsOneLineNamingIt) {
  wm::test::TempDir dir;
  const WeightsFile good(kGolden + "weights.safetensors");
  const seedvr2::DitArchitecture arch = seedvr2::infer_dit_architecture(shapes(good), 0);
  std::vector<wm::models::ExpectedTensor> expected;
  for (const auto& p : seedvr2::dit_layout(arch)) expected.push_back({p.key, p.shape, true});
  EXPECT_NO_THROW(wm::models::check_tensors(good, expected, arch.str()));

  // A file without block 2's MLP input: named, with the count of the rest.
  std::vector<wm::io::TensorEntry> entries;
  for (const auto& [key, info] : good.tensors()) {
    if (key == "blocks.2.mlp.all.proj_in.weight") continue;
    entries.push_back({key, info.dtype, info.shape, info.data, info.bytes});
  }
  const std::string missing = dir.path() + "/missing.safetensors";
  wm::io::write_safetensors(missing, entries);
  try {
    wm::models::check_tensors(WeightsFile(missing), expected, arch.str());
    FAIL() << "no error";
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(std::string(e.what()),
              missing +
                  ": missing key blocks.2.mlp.all.proj_in.weight (expected shape [256, 64]) (" +
                  arch.str() + ")");
    EXPECT_EQ(e.exit_code(), wm::kExitDataErr);
  }

  // A truncated file: the reader names it.
  const std::string truncated = dir.path() + "/truncated.safetensors";
  {
    std::ifstream in(kGolden + "weights.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  try {
    WeightsFile file(truncated);
    FAIL() << "no error";
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(truncated + ": ", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(SeedVR2DitWeights, Float8E4M3Values) {
  const float* v = wm::models::float8_e4m3_values();
  EXPECT_EQ(v[0x00], 0.0f);
  EXPECT_EQ(v[0x38], 1.0f);    // exponent 7, mantissa 0
  EXPECT_EQ(v[0x7e], 448.0f);  // the largest
  EXPECT_EQ(v[0xfe], -448.0f);
  EXPECT_EQ(v[0x01], 0.001953125f);  // the smallest subnormal, 2^-9
  EXPECT_TRUE(std::isnan(v[0x7f]));
}

// A .safetensors file with float8 e4m3 matrices (the ComfyUI conversions' form): read as the
// values its bytes stand for, the DiT the same as from those values in float32.
TEST(SeedVR2DitWeights, Float8FileLoadsAsItsValues) {
  wm::test::TempDir dir;
  const WeightsFile good(kGolden + "weights.safetensors");
  const float* table = wm::models::float8_e4m3_values();
  std::vector<float> finite(table, table + 256);
  for (float& v : finite) v = std::isnan(v) ? 0.0f : v;
  const at::Tensor values = at::from_blob(finite.data(), {256}, at::kFloat).clone();
  std::vector<wm::io::TensorEntry> entries;
  std::vector<at::Tensor> keep;
  seedvr2::DitParams dequantised;
  for (const auto& [key, info] : good.tensors()) {
    at::Tensor t = wm::models::host_tensor(info);
    if (t.dim() == 2) {
      const at::Tensor index =
          (t.reshape({-1, 1}) - values.reshape({1, -1})).abs().argmin(1).to(at::kByte).contiguous();
      keep.push_back(index);
      entries.push_back({key, "F8_E4M3", info.shape, index.data_ptr(), size_t(index.numel())});
      t = values.index_select(0, index.to(at::kLong)).view(t.sizes());
    } else {
      entries.push_back({key, info.dtype, info.shape, info.data, info.bytes});
    }
    dequantised[key] = t;
  }
  const std::string path = dir.path() + "/fp8.safetensors";
  wm::io::write_safetensors(path, entries);
  const WeightsFile fp8(path);
  seedvr2::DitParams from_file;
  for (const auto& [key, info] : fp8.tensors()) {
    from_file[key] = wm::models::host_tensor(info);
    EXPECT_TRUE(at::equal(from_file[key], dequantised[key])) << key;
  }
  const auto arch = seedvr2::infer_dit_architecture(shapes(fp8), 0);
  const WeightsFile c(kGolden + "dit_t5_h8w12.safetensors");
  const at::Tensor a =
      seedvr2::DitNetwork(arch, from_file, {}).forward(read(c, "vid"), read(c, "txt"), 1000.0);
  const at::Tensor b =
      seedvr2::DitNetwork(arch, dequantised, {}).forward(read(c, "vid"), read(c, "txt"), 1000.0);
  EXPECT_TRUE(at::equal(a, b));
}

// --- golden vectors ----------------------------------------------------------------------------

// Every DiT case: the output and (where stored) every intermediate within 1e-4 of float64.
TEST(SeedVR2DitGolden, EveryCaseAndIntermediate) {
  const auto net = golden_network();
  for (const char* name : {"dit_t1_h8w12", "dit_t1_h8w12_ts250", "dit_t5_h8w12", "dit_t2_h36w50"}) {
    const WeightsFile file(kGolden + name + ".safetensors");
    std::map<std::string, at::Tensor> got;
    const at::Tensor out =
        net->forward(read(file, "vid"), read(file, "txt"), read(file, "timestep").item<double>(),
                     [&](const std::string& n, const at::Tensor& x) { got[n] = x.clone(); });
    got["output"] = out;
    int compared = 0;
    for (const auto& [n, x] : got) {
      if (!file.find(n)) continue;
      const double d = max_diff(x, read(file, n));
      EXPECT_LE(d, 1e-4) << name << " " << n;
      RecordProperty(std::string(name) + "_" + n, std::to_string(d));
      ++compared;
    }
    EXPECT_GE(compared, std::string(name) == "dit_t2_h36w50" ? 1 : 14) << name;
  }
}

// The random weights of the benchmark have the layout's shapes and run.
TEST(SeedVR2DitGolden, RandomWeightsRun) {
  seedvr2::DitArchitecture arch = seedvr2::DitArchitecture::official_3b();
  arch.dim = 64, arch.heads = 2, arch.head_dim = 32, arch.layers = 3, arch.mm_layers = 1;
  arch.mlp_hidden = 256, arch.rope_freqs = 5, arch.txt_in_dim = 16;
  const seedvr2::DitParams params = seedvr2::random_dit_params(arch, 7);
  for (const auto& p : seedvr2::dit_layout(arch)) {
    ASSERT_TRUE(params.count(p.key)) << p.key;
    EXPECT_EQ(params.at(p.key).sizes().vec(), p.shape) << p.key;
  }
  const seedvr2::DitNetwork net(arch, params, {});
  const at::Tensor y = net.forward(at::randn({2, 4, 6, 33}), at::randn({3, 16}), 1000.0);
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2, 4, 6, 16}));
  EXPECT_TRUE(at::isfinite(y).all().item<bool>());
}

// Matrices over 2^22 values (the official shapes) are tiled from one pool of draws: still within
// U(±√(3/fan_in)), spread over it, deterministic, each matrix from its own offset, and they run.
TEST(SeedVR2DitGolden, LargeRandomMatricesFromThePool) {
  seedvr2::DitArchitecture arch = seedvr2::DitArchitecture::official_3b();
  arch.dim = 64, arch.heads = 2, arch.head_dim = 32, arch.layers = 2, arch.mm_layers = 1;
  arch.mlp_hidden = 66000, arch.rope_freqs = 5, arch.txt_in_dim = 16;  // MLP: 4.2 M > 2^22
  const seedvr2::DitParams a = seedvr2::random_dit_params(arch, 7, at::kBFloat16);
  const seedvr2::DitParams b = seedvr2::random_dit_params(arch, 7, at::kBFloat16);
  std::vector<at::Tensor> large;
  for (const auto& p : seedvr2::dit_layout(arch)) {
    const at::Tensor t = a.at(p.key);
    if (p.shape.size() != 2 || t.numel() <= (int64_t(1) << 22)) continue;
    large.push_back(t);
    const double bound = std::sqrt(3.0 / double(p.shape[1]));
    const at::Tensor f = t.to(at::kFloat);
    EXPECT_LE(f.abs().max().item<double>(), bound * 1.01) << p.key;
    EXPECT_NEAR(f.abs().mean().item<double>(), bound / 2, bound * 0.02) << p.key;
    EXPECT_TRUE(at::equal(t, b.at(p.key))) << p.key;
  }
  ASSERT_GE(large.size(), 2u);
  EXPECT_FALSE(at::equal(large[0], large[1]));
  const at::Tensor y =
      seedvr2::DitNetwork(arch, a, {}).forward(at::randn({1, 2, 2, 33}), at::randn({3, 16}), 1000);
  EXPECT_TRUE(at::isfinite(y).all().item<bool>());
}

}  // namespace
