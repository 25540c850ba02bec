#include "src/models/seedvr2/seedvr2_layout.h"

#include <algorithm>
#include <utility>

#include "src/base/error.h"

namespace wm::models::seedvr2 {
namespace {

class LayoutBuilder {
 public:
  explicit LayoutBuilder(bool decoder) : decoder_(decoder) {}
  std::vector<ParamSpec> take() { return std::move(specs_); }

  void add(const std::string& key, std::vector<int64_t> shape) {
    specs_.push_back({key, std::move(shape), decoder_});
  }
  void conv(const std::string& name, int64_t out, int64_t in, int64_t kt, int64_t k) {
    add(name + ".weight", {out, in, kt, k, k});
    add(name + ".bias", {out});
  }
  void norm(const std::string& name, int64_t c) {
    add(name + ".weight", {c});
    add(name + ".bias", {c});
  }
  void resnet(const std::string& name, int64_t in, int64_t out) {
    norm(name + ".norm1", in);
    conv(name + ".conv1", out, in, 3, 3);
    norm(name + ".norm2", out);
    conv(name + ".conv2", out, out, 3, 3);
    if (in != out) conv(name + ".conv_shortcut", out, in, 1, 1);
  }
  void mid_block(const std::string& name, int64_t c) {
    const std::string a = name + ".attentions.0";
    norm(a + ".group_norm", c);
    for (const char* linear : {".to_q", ".to_k", ".to_v", ".to_out.0"}) {
      add(a + linear + ".weight", {c, c});
      add(a + linear + ".bias", {c});
    }
    resnet(name + ".resnets.0", c, c);
    resnet(name + ".resnets.1", c, c);
  }

 private:
  bool decoder_;
  std::vector<ParamSpec> specs_;
};

std::string join(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

void Architecture::validate() const {
  auto fail = [](const std::string& what) { throw ModelError("seedvr2-vae: " + what); };
  if (levels() < 1) fail("no channel widths");
  if (temporal_scale_num < 0 || temporal_scale_num > levels() - 1) {
    fail("temporal_scale_num " + std::to_string(temporal_scale_num) + " does not fit " +
         std::to_string(levels()) + " levels");
  }
  if (latent_channels < 1 || in_channels < 1) fail("channel counts must be positive");
  if (norm_groups < 1) fail("norm_groups must be positive");
  for (int64_t c : channels) {
    if (c < 1) fail("channel widths must be positive (" + join(channels) + ")");
    if (c % norm_groups != 0) {
      fail("norm_groups " + std::to_string(norm_groups) + " does not divide the channel width " +
           std::to_string(c) + " (widths " + join(channels) +
           " from the checkpoint; set model.norm_groups)");
    }
  }
}

std::string Architecture::str() const {
  return "channels " + join(channels) + ", latent " + std::to_string(latent_channels) + ", " +
         std::to_string(norm_groups) + " groups";
}

std::vector<ParamSpec> layout(const Architecture& arch) {
  const int n = arch.levels();
  const std::vector<int64_t>& c = arch.channels;
  std::vector<ParamSpec> out;

  LayoutBuilder enc(false);
  enc.conv("encoder.conv_in", c[0], arch.in_channels, 3, 3);
  for (int i = 0; i < n; ++i) {
    const std::string block = "encoder.down_blocks." + std::to_string(i);
    int64_t in = i == 0 ? c[0] : c[i - 1];
    for (int j = 0; j < arch.layers_per_block; ++j) {
      enc.resnet(block + ".resnets." + std::to_string(j), in, c[i]);
      in = c[i];
    }
    if (i < n - 1)
      enc.conv(block + ".downsamplers.0.conv", c[i], c[i], arch.down_temporal(i) ? 3 : 1, 3);
  }
  enc.mid_block("encoder.mid_block", c[n - 1]);
  enc.norm("encoder.conv_norm_out", c[n - 1]);
  enc.conv("encoder.conv_out", 2 * int64_t(arch.latent_channels), c[n - 1], 3, 3);
  out = enc.take();

  LayoutBuilder dec(true);
  dec.conv("decoder.conv_in", c[n - 1], arch.latent_channels, 3, 3);
  int64_t prev = c[n - 1];
  for (int i = 0; i < n; ++i) {
    const std::string block = "decoder.up_blocks." + std::to_string(i);
    const int64_t width = c[n - 1 - i];
    int64_t in = prev;
    for (int j = 0; j < arch.layers_per_block + 1; ++j) {
      dec.resnet(block + ".resnets." + std::to_string(j), in, width);
      in = width;
    }
    if (i < n - 1) {
      const int64_t z = arch.up_temporal(i) ? 2 : 1;
      dec.conv(block + ".upsamplers.0.conv", width, width, 3, 3);
      dec.conv(block + ".upsamplers.0.upscale_conv", width * 4 * z, width, 1, 1);
    }
    prev = width;
  }
  dec.mid_block("decoder.mid_block", c[n - 1]);
  dec.norm("decoder.conv_norm_out", c[0]);
  dec.conv("decoder.conv_out", arch.in_channels, c[0], 3, 3);
  for (ParamSpec& s : dec.take()) out.push_back(std::move(s));
  return out;
}

Architecture infer_architecture(const ShapeOf& shape_of, bool decoder, int norm_groups) {
  Architecture arch;
  arch.norm_groups = norm_groups;
  const int n = arch.levels();
  struct Source {
    std::string key;
    size_t dim;
    int64_t divisor;
    bool decoder;
  };
  // The value most keys agree on (a single mis-shaped key is then reported as such, not taken
  // for the width); ties go to the task's own half, then to the earlier key.
  auto vote = [&](const std::vector<Source>& sources, int64_t& value) {
    std::vector<std::pair<int64_t, int>> counts;  // value, votes (in first-seen order)
    for (bool own : {true, false}) {
      for (const Source& s : sources) {
        if ((s.decoder == decoder) != own) continue;
        const std::vector<int64_t>* shape = shape_of(s.key);
        if (!shape || shape->size() <= s.dim) continue;
        const int64_t size = (*shape)[s.dim];
        if (size <= 0 || size % s.divisor != 0) continue;
        auto it = std::find_if(counts.begin(), counts.end(),
                               [&](const auto& c) { return c.first == size / s.divisor; });
        if (it == counts.end()) {
          counts.push_back({size / s.divisor, 1});
        } else {
          ++it->second;
        }
      }
    }
    int best = 0;
    for (const auto& c : counts) {
      if (c.second > best) best = c.second, value = c.first;
    }
  };
  auto resnet_sources = [&](std::vector<Source>& out, const std::string& block, int resnets,
                            bool dec) {
    for (int j = 0; j < resnets; ++j) {
      const std::string r = block + ".resnets." + std::to_string(j) + ".";
      for (const char* key : {"conv1.weight", "conv1.bias", "norm2.weight", "norm2.bias",
                              "conv2.weight", "conv2.bias"}) {
        out.push_back({r + key, 0, 1, dec});
      }
      out.push_back({r + "conv2.weight", 1, 1, dec});
    }
  };
  for (int i = 0; i < n; ++i) {
    std::vector<Source> sources;
    resnet_sources(sources, "encoder.down_blocks." + std::to_string(i), arch.layers_per_block,
                   false);
    resnet_sources(sources, "decoder.up_blocks." + std::to_string(n - 1 - i),
                   arch.layers_per_block + 1, true);
    if (i == 0) {
      sources.push_back({"encoder.conv_in.weight", 0, 1, false});
      sources.push_back({"decoder.conv_out.weight", 1, 1, true});
      sources.push_back({"decoder.conv_norm_out.weight", 0, 1, true});
    }
    if (i == n - 1) {
      sources.push_back({"encoder.conv_out.weight", 1, 1, false});
      sources.push_back({"encoder.conv_norm_out.weight", 0, 1, false});
      sources.push_back({"decoder.conv_in.weight", 0, 1, true});
    }
    vote(sources, arch.channels[size_t(i)]);
  }
  int64_t latent = arch.latent_channels;
  vote({{"encoder.conv_out.weight", 0, 2, false},
        {"encoder.conv_out.bias", 0, 2, false},
        {"decoder.conv_in.weight", 1, 1, true}},
       latent);
  arch.latent_channels = int(latent);
  return arch;
}

}  // namespace wm::models::seedvr2
