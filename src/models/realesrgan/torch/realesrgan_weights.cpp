#include "src/models/realesrgan/torch/realesrgan_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <regex>

#include <ATen/CPUGeneratorImpl.h>

#include "src/base/clip_text.h"
#include "src/base/error.h"
#include "src/models/torch/tensor.h"
#include "src/weights/safetensors.h"
#include "src/weights/torch_pickle.h"

namespace wm::models {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool starts_with(const std::string& s, const std::string& head) {
  return s.compare(0, head.size(), head) == 0;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void add_conv(std::vector<std::pair<std::string, std::vector<int64_t>>>& keys,
              const std::string& name, int64_t out, int64_t in) {
  keys.push_back({name + ".weight", {out, in, 3, 3}});
  keys.push_back({name + ".bias", {out}});
}

// Old-ESRGAN names (as chaiNNer's spandrel maps them) → official RRDBNet names; others unchanged.
std::string official_name(const std::string& name, int blocks) {
  static const std::regex kSub(R"(model\.1\.sub\.(\d+)\.RDB(\d)\.conv(\d)\.0\.(weight|bias))");
  static const std::regex kBody(R"(model\.1\.sub\.(\d+)\.(weight|bias))");
  static const std::regex kTop(R"(model\.(\d+)\.(weight|bias))");
  std::smatch m;
  if (std::regex_match(name, m, kSub)) {
    return "body." + m[1].str() + ".rdb" + m[2].str() + ".conv" + m[3].str() + "." + m[4].str();
  }
  if (std::regex_match(name, m, kBody) && std::stoi(m[1].str()) == blocks) {
    return "conv_body." + m[2].str();
  }
  if (std::regex_match(name, m, kTop)) {
    static const std::map<std::string, std::string> kTail = {{"0", "conv_first"},
                                                             {"3", "conv_up1"},
                                                             {"6", "conv_up2"},
                                                             {"8", "conv_hr"},
                                                             {"10", "conv_last"}};
    if (auto it = kTail.find(m[1].str()); it != kTail.end()) return it->second + "." + m[2].str();
  }
  return name;
}

at::ScalarType dtype_of(const std::string& dtype, const std::string& path,
                        const std::string& name) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F64") return at::kDouble;
  throw ModelError(path + ": tensor '" + name + "' has dtype " + dtype +
                   ", not a float type (F32, F16, BF16, F64)");
}

// A float32 copy of `count` elements at `data` (maybe unaligned), then strided as given.
at::Tensor copy_tensor(const void* data, at::ScalarType type, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& strides) {
  int64_t extent = 1;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) empty = true;
    extent += (shape[i] - 1) * strides[i];
  }
  if (empty) return at::empty(shape, at::kFloat);
  at::Tensor flat = at::empty({extent}, type);
  std::memcpy(flat.data_ptr(), data, size_t(extent) * flat.element_size());
  return flat.as_strided(shape, strides).to(at::kFloat).contiguous();
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::optional<int> index_after(const std::string& name, const std::string& head) {
  if (!starts_with(name, head)) return std::nullopt;
  size_t end = head.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == head.size() || end >= name.size() || name[end] != '.') return std::nullopt;
  return std::stoi(name.substr(head.size(), end - head.size()));
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> realesrgan_keys(const RealEsrganArch& a) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> keys;
  const int64_t f = a.features;
  if (a.family == RealEsrganArch::Family::kSrvgg) {
    add_conv(keys, "body.0", f, 3);
    keys.push_back({"body.1.weight", {f}});
    for (int k = 1; k <= a.convs; ++k) {
      add_conv(keys, "body." + std::to_string(2 * k), f, f);
      keys.push_back({"body." + std::to_string(2 * k + 1) + ".weight", {f}});
    }
    add_conv(keys, "body." + std::to_string(2 * a.convs + 2), 3 * a.scale * a.scale, f);
    return keys;
  }
  const int64_t g = a.growth;
  const int64_t unshuffle = a.scale == 2 ? 2 : a.scale == 1 ? 4 : 1;
  add_conv(keys, "conv_first", f, 3 * unshuffle * unshuffle);
  for (int i = 0; i < a.blocks; ++i) {
    for (int j = 1; j <= 3; ++j) {
      const std::string rdb = "body." + std::to_string(i) + ".rdb" + std::to_string(j) + ".conv";
      for (int k = 1; k <= 4; ++k) add_conv(keys, rdb + std::to_string(k), g, f + (k - 1) * g);
      add_conv(keys, rdb + "5", f, f + 4 * g);
    }
  }
  for (const char* name : {"conv_body", "conv_up1", "conv_up2", "conv_hr"}) {
    add_conv(keys, name, f, f);
  }
  add_conv(keys, "conv_last", 3, f);
  return keys;
}

RealEsrganArch infer_realesrgan_arch(const std::map<std::string, std::vector<int64_t>>& shapes,
                                     const std::string& path) {
  const auto shape = [&](const std::string& key) -> const std::vector<int64_t>* {
    const auto it = shapes.find(key);
    return it == shapes.end() ? nullptr : &it->second;
  };
  RealEsrganArch arch;
  const auto* first = shape("body.0.weight");
  const auto* conv_first = shape("conv_first.weight");
  if (first && first->size() == 4 && (*first)[1] == 3) {
    arch.family = RealEsrganArch::Family::kSrvgg;
    arch.features = int((*first)[0]);
    int last = 0;
    for (const auto& [name, s] : shapes) {
      if (auto i = index_after(name, "body.")) last = std::max(last, *i);
    }
    const auto* act = shape("body.1.weight");
    if (!act || act->size() != 1) {
      throw ModelError(path + ": SRVGGNetCompact without PReLU weights (body.1.weight [" +
                       std::to_string(arch.features) +
                       "]): its activation (relu or leakyrelu) cannot be told; only PReLU "
                       "models are supported");
    }
    if (last < 2 || last % 2) {
      throw ModelError(path + ": SRVGGNetCompact's last layer is body." + std::to_string(last) +
                       "; expected an even index 2·num_conv + 2");
    }
    arch.convs = (last - 2) / 2;
    const auto* out = shape("body." + std::to_string(last) + ".weight");
    const int64_t channels = out && out->size() == 4 ? (*out)[0] : 0;
    const int s = int(std::lround(std::sqrt(double(channels) / 3)));
    if (s < 1 || 3 * s * s != channels) {
      throw ModelError(path + ": SRVGGNetCompact's last conv body." + std::to_string(last) +
                       ".weight has " + std::to_string(channels) +
                       " output channels; expected 3·scale² (48 for x4)");
    }
    arch.scale = s;
  } else if (conv_first && conv_first->size() == 4) {
    arch.family = RealEsrganArch::Family::kRrdb;
    arch.features = int((*conv_first)[0]);
    const int64_t in = (*conv_first)[1];
    if (in == 3) {
      arch.scale = 4;
    } else if (in == 12) {
      arch.scale = 2;
    } else if (in == 48) {
      arch.scale = 1;
    } else {
      throw ModelError(path + ": RRDBNet's conv_first.weight takes " + std::to_string(in) +
                       " channels; expected 3 (x4), 12 (x2) or 48 (x1)");
    }
    arch.blocks = 0;
    while (shapes.count("body." + std::to_string(arch.blocks) + ".rdb1.conv1.weight")) {
      ++arch.blocks;
    }
    const auto* conv1 = shape("body.0.rdb1.conv1.weight");
    if (!conv1 || conv1->size() != 4) {
      throw ModelError(path + ": RRDBNet without body.0.rdb1.conv1.weight (no RRDB blocks)");
    }
    arch.growth = int((*conv1)[0]);
  } else {
    std::string found;
    int listed = 0;
    for (const auto& [name, s] : shapes) {
      if (listed++ == 4) {
        found += ", ...";
        break;
      }
      found += (found.empty() ? "" : ", ") + one_line(clip(name, 80)) + " " + shape_text(s);
    }
    throw ModelError(
        path +
        ": neither SRVGGNetCompact (expected body.0.weight [F,3,3,3], body.1.weight [F], "
        "...) nor RRDBNet (expected conv_first.weight [F,3|12|48,3,3], "
        "body.0.rdb1.conv1.weight, ...); found " +
        std::to_string(shapes.size()) + " tensors" + (found.empty() ? "" : ": " + found));
  }
  // Every key of the inferred architecture with its shape, and nothing else.
  const auto expected = realesrgan_keys(arch);
  for (const auto& [name, want] : expected) {
    const auto* got = shape(name);
    if (!got) {
      throw ModelError(path + ": " + arch.describe() + " needs '" + name + "' " + shape_text(want) +
                       ", which the file lacks");
    }
    if (*got != want) {
      throw ModelError(path + ": " + arch.describe() + ": '" + name + "' should be " +
                       shape_text(want) + ", found " + shape_text(*got));
    }
  }
  if (shapes.size() != expected.size()) {
    for (const auto& found : shapes) {
      const auto& name = found.first;  // (a structured binding: not capturable in C++17)
      const auto& s = found.second;
      const bool known = std::any_of(expected.begin(), expected.end(),
                                     [&](const auto& e) { return e.first == name; });
      if (!known) {
        throw ModelError(path + ": " + arch.describe() + " has no tensor '" +
                         one_line(clip(name, 80)) + "' " + shape_text(s) + " (found in the file)");
      }
    }
  }
  return arch;
}

RealEsrganWeights load_realesrgan_weights(const std::string& path) {
  RealEsrganWeights w;
  std::map<std::string, std::vector<int64_t>> shapes;
  // name → (data, dtype, shape, strides)
  struct Raw {
    const void* data;
    std::string dtype;
    std::vector<int64_t> shape, strides;
  };
  std::map<std::string, Raw> raw;
  std::optional<io::SafetensorsFile> st;
  std::optional<io::TorchCheckpoint> ckpt;
  // Names may carry a `params.`/`params_ema.` prefix (a flattened checkpoint) or old-ESRGAN
  // names: both are mapped to the official ones, after counting the old layout's blocks.
  std::vector<std::pair<std::string, Raw>> entries;
  if (ends_with(path, ".safetensors")) {
    try {
      st.emplace(path);
    } catch (const InputError& e) {
      if (e.exit_code() == kExitNoInput) throw;
      throw ModelError(e.what());
    }
    std::string prefix;
    for (const char* p : {"params_ema.", "params."}) {
      const auto names = st->names();
      if (std::any_of(names.begin(), names.end(),
                      [&](const auto& n) { return starts_with(n, p); })) {
        prefix = p;
        break;
      }
    }
    for (const std::string& name : st->names()) {
      if (!starts_with(name, prefix)) continue;
      const io::TensorInfo& t = st->info(name);
      entries.push_back(
          {name.substr(prefix.size()), {t.data, t.dtype, t.shape, contiguous_strides(t.shape)}});
    }
  } else {
    ckpt.emplace(path);
    const std::map<std::string, io::TorchTensor>* dict = &ckpt->dict("params_ema");
    if (dict->empty()) dict = &ckpt->dict("params");
    if (dict->empty()) dict = &ckpt->tensors();  // a bare state dict
    if (dict->empty()) {
      // A few keys, then how many more: a refused file may have 100 000 (one line, not 3 MB).
      constexpr size_t kListed = 8;
      std::string keys;
      size_t listed = 0;
      for (const auto& [k, kind] : ckpt->top_level()) {
        if (listed++ == kListed) {
          keys += ", and " + std::to_string(ckpt->top_level().size() - kListed) + " more";
          break;
        }
        keys += (keys.empty() ? "" : ", ") + one_line(clip(k, 80)) + " (" + kind + ")";
      }
      throw ModelError(path + ": no tensors under 'params_ema', 'params' or the top level (found " +
                       (keys.empty() ? std::string("an empty dict") : keys) + ")");
    }
    for (const auto& [name, t] : *dict) {
      entries.push_back({name, {t.data, t.dtype, t.shape, t.strides}});
    }
  }
  int old_blocks = 0;
  for (const auto& [name, r] : entries) {
    if (auto i = index_after(name, "model.1.sub.")) old_blocks = std::max(old_blocks, *i);
  }
  for (auto& [name, r] : entries) {
    const std::string official = official_name(name, old_blocks);
    shapes[official] = r.shape;
    raw[official] = r;
  }
  w.arch = infer_realesrgan_arch(shapes, path);
  return guarded("realesrgan: reading weights", [&] {
    for (const auto& [name, r] : raw) {
      w.tensors[name] = copy_tensor(r.data, dtype_of(r.dtype, path, name), r.shape, r.strides);
    }
    return std::move(w);
  });
}

RealEsrganWeights random_realesrgan_weights(const RealEsrganArch& arch, uint64_t seed) {
  RealEsrganWeights w;
  w.arch = arch;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (const auto& [name, shape] : realesrgan_keys(arch)) {
    at::Tensor t;
    if (shape.size() == 4) {
      const double fan_in = double(shape[1] * 9);
      t = at::normal(0.0, std::sqrt(2.0 / (1.0625 * fan_in)), shape, gen);
      if (arch.family == RealEsrganArch::Family::kRrdb) t.mul_(0.1);  // BasicSR's RRDB init
    } else if (ends_with(name, ".bias")) {
      t = at::normal(0.0, 0.01, shape, gen);
    } else {  // PReLU slopes
      t = at::empty(shape, at::kFloat).uniform_(0.05, 0.45, gen);
    }
    w.tensors[name] = t.to(at::kFloat).contiguous();
  }
  return w;
}

void write_random_realesrgan(const RealEsrganArch& arch, const std::string& path, uint64_t seed) {
  const RealEsrganWeights w = random_realesrgan_weights(arch, seed);
  std::vector<io::TensorEntry> entries;
  for (const auto& [name, shape] : realesrgan_keys(arch)) {
    const at::Tensor& t = w.tensors.at(name);
    io::TensorEntry e;
    e.name = name;
    e.shape = shape;
    e.data = t.data_ptr<float>();
    e.bytes = size_t(t.numel()) * sizeof(float);
    entries.push_back(e);
  }
  io::write_safetensors(path, entries, {{"arch", arch.describe()}});
}

}  // namespace wm::models
