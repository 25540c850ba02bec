#include "src/models/seedvr2/seedvr2_dit_layout.h"

#include <algorithm>
#include <cmath>

#include "src/base/error.h"

namespace wm::models::seedvr2 {
namespace {

constexpr int kMaxLayers = 4096;

// Python's round() of a float: halves to even.
int round_half_even(double x) { return int(std::nearbyint(x)); }

// Python's math.ceil(a / b) for integers (float division, as upstream).
int ceil_div(int a, int b) { return int(std::ceil(double(a) / double(b))); }

}  // namespace

DitArchitecture DitArchitecture::official_3b() { return DitArchitecture{}; }

DitArchitecture DitArchitecture::official_7b() {
  DitArchitecture a;
  a.variant = DitVariant::k7B;
  a.dim = 3072;
  a.heads = 24;
  a.layers = 36;
  a.mm_layers = 36;
  a.mlp_hidden = 4 * 3072;
  a.rope_freqs = 10;
  return a;
}

void DitArchitecture::validate() const {
  auto fail = [&](const std::string& what) { throw ModelError("seedvr2 dit: " + what); };
  if (dim < 1 || txt_in_dim < 1 || heads < 1 || head_dim < 1 || layers < 1 || mlp_hidden < 1) {
    fail("widths and counts must be positive (" + str() + ")");
  }
  if (head_dim % 2 != 0) fail("head width " + std::to_string(head_dim) + " is odd");
  if (3 * rope_axis() > head_dim) {
    fail("RoPE rotates " + std::to_string(3 * rope_axis()) + " channels of a head of " +
         std::to_string(head_dim));
  }
  if (mm_layers < 0 || mm_layers > layers) fail("mm_layers outside [0, layers]");
}

std::string DitArchitecture::str() const {
  return std::string(variant == DitVariant::k3B ? "3B" : "7B") + " layout: dim " +
         std::to_string(dim) + ", " + std::to_string(heads) + " heads × " +
         std::to_string(head_dim) + ", " + std::to_string(layers) + " layers (" +
         std::to_string(variant == DitVariant::k3B ? mm_layers : layers) + " separate), MLP " +
         std::to_string(mlp_hidden) + ", text " + std::to_string(txt_in_dim);
}

std::vector<DitParam> dit_layout(const DitArchitecture& a) {
  std::vector<DitParam> out;
  int block = -1;
  auto add = [&](const std::string& key, std::vector<int64_t> shape) {
    out.push_back({key, std::move(shape), block});
  };
  auto linear = [&](const std::string& name, int64_t o, int64_t i, bool bias = true) {
    add(name + ".weight", {o, i});
    if (bias) add(name + ".bias", {o});
  };
  linear("vid_in.proj", a.dim, a.patch_features());
  linear("txt_in", a.dim, a.txt_in_dim);
  linear("emb_in.proj_in", a.dim, 256);
  linear("emb_in.proj_hid", a.dim, a.dim);
  linear("emb_in.proj_out", a.emb_dim(), a.dim);
  for (block = 0; block < a.layers; ++block) {
    const std::string p = "blocks." + std::to_string(block) + ".";
    const std::vector<std::string> branches = a.separate(block)
                                                  ? std::vector<std::string>{"vid", "txt"}
                                                  : std::vector<std::string>{"all"};
    for (const auto& b : branches) linear(p + "attn.proj_qkv." + b, 3 * a.inner(), a.dim, false);
    for (const auto& b : branches) linear(p + "attn.proj_out." + b, a.dim, a.inner());
    for (const auto& b : branches) add(p + "attn.norm_q." + b + ".weight", {a.head_dim});
    for (const auto& b : branches) add(p + "attn.norm_k." + b + ".weight", {a.head_dim});
    add(p + "attn.rope.rope.freqs", {a.rope_freqs});
    for (const auto& b : branches) {
      const std::string m = p + "mlp." + b + ".";
      if (a.swiglu()) {
        linear(m + "proj_in_gate", a.mlp_hidden, a.dim, false);
        linear(m + "proj_out", a.dim, a.mlp_hidden, false);
        linear(m + "proj_in", a.mlp_hidden, a.dim, false);
      } else {
        linear(m + "proj_in", a.mlp_hidden, a.dim);
        linear(m + "proj_out", a.dim, a.mlp_hidden);
      }
    }
    for (const auto& b : branches) {
      for (const char* layer : {"attn", "mlp"}) {
        for (const char* what : {"shift", "scale", "gate"}) {
          add(p + "ada." + b + "." + layer + "_" + what, {a.dim});
        }
      }
    }
  }
  block = -1;
  if (a.out_norm()) {
    add("vid_out_norm.weight", {a.dim});
    add("vid_out_ada.out_shift", {a.dim});
    add("vid_out_ada.out_scale", {a.dim});
  }
  linear("vid_out.proj", a.out_channels * DitArchitecture::kPatch * DitArchitecture::kPatch, a.dim);
  return out;
}

DitArchitecture infer_dit_architecture(const ShapeOf& shape_of, int heads) {
  // 3B unless block 0's MLP has the 7B's biases; the official numbers of that variant where the
  // file has no key to say otherwise.
  const bool is_7b =
      shape_of("blocks.0.mlp.vid.proj_in.bias") || shape_of("blocks.0.mlp.all.proj_in.bias");
  DitArchitecture a = is_7b ? DitArchitecture::official_7b() : DitArchitecture::official_3b();
  auto dim0 = [&](const std::string& key, int64_t& out, size_t rank, size_t axis) {
    const std::vector<int64_t>* s = shape_of(key);
    if (s && s->size() == rank) out = (*s)[axis];
    return s && s->size() == rank;
  };
  if (!dim0("vid_in.proj.weight", a.dim, 2, 0)) dim0("txt_in.weight", a.dim, 2, 0);
  dim0("txt_in.weight", a.txt_in_dim, 2, 1);
  // Blocks: as long as block i has attention weights of either kind; the first shared one ends
  // the separate ones.
  auto has_block = [&](int i, const char* branch) {
    return shape_of("blocks." + std::to_string(i) + ".attn.proj_qkv." + branch + ".weight") !=
           nullptr;
  };
  int layers = 0, first_shared = -1;
  while (layers < kMaxLayers && (has_block(layers, "vid") || has_block(layers, "all"))) {
    if (first_shared < 0 && !has_block(layers, "vid")) first_shared = layers;
    ++layers;
  }
  if (layers > 0) {
    a.layers = layers;
    a.mm_layers = is_7b ? layers : (first_shared < 0 ? layers : first_shared);
  }
  const char* b0 = has_block(0, "vid") ? "vid" : "all";
  int64_t qkv = 0;
  const bool have_qkv =
      dim0(std::string("blocks.0.attn.proj_qkv.") + b0 + ".weight", qkv, 2, 0) && qkv % 3 == 0;
  int64_t head_dim = 0;
  dim0(std::string("blocks.0.attn.norm_q.") + b0 + ".weight", head_dim, 1, 0);
  if (heads > 0) {
    a.heads = heads;
    if (have_qkv && (qkv / 3) % heads == 0) a.head_dim = qkv / 3 / heads;
  } else if (have_qkv && head_dim > 0 && (qkv / 3) % head_dim == 0) {
    a.head_dim = head_dim;
    a.heads = int(qkv / 3 / head_dim);
  }
  dim0(std::string("blocks.0.mlp.") + b0 + ".proj_in.weight", a.mlp_hidden, 2, 0);
  dim0("blocks.0.attn.rope.rope.freqs", a.rope_freqs, 1, 0);
  return a;
}

std::array<int, 3> dit_window_size(int t, int h, int w) {
  // The grid rescaled to the area of a 720p latent grid (45 × 80 tokens), a third of it per
  // window in space and a quarter of (at most 30) frames in time. Python floats and rounding.
  const double scale = std::pow(45.0 * 80.0 / (double(h) * double(w)), 0.5);
  const int rh = round_half_even(double(h) * scale);
  const int rw = round_half_even(double(w) * scale);
  return {ceil_div(std::min(t, 30), 4), ceil_div(rh, 3), ceil_div(rw, 3)};
}

std::vector<TokenRange> dit_window_ranges(int n, int s, bool shifted) {
  std::vector<TokenRange> out;
  if (n <= 0 || s <= 0) return out;
  if (!shifted) {
    for (int k = 0; k * s < n; ++k) out.push_back({k * s, std::min((k + 1) * s, n)});
    return out;
  }
  if (s >= n) return {{0, n}};
  const int last = int(std::ceil((double(n) - 0.5) / double(s)));
  for (int k = 0; k <= last; ++k) {
    // trunc((k − ½)·s) and trunc((k + ½)·s), toward zero.
    const int lo = std::max(int(std::trunc((double(k) - 0.5) * s)), 0);
    const int hi = std::min(int(std::trunc((double(k) + 0.5) * s)), n);
    if (hi > lo) out.push_back({lo, hi});
  }
  return out;
}

std::vector<DitWindow> dit_windows(int t, int h, int w, bool shifted) {
  const std::array<int, 3> size = dit_window_size(t, h, w);
  const auto rt = dit_window_ranges(t, size[0], shifted);
  const auto rh = dit_window_ranges(h, size[1], shifted);
  const auto rw = dit_window_ranges(w, size[2], shifted);
  std::vector<DitWindow> out;
  for (const TokenRange& x : rw) {
    for (const TokenRange& y : rh) {
      for (const TokenRange& z : rt) out.push_back({z, y, x});
    }
  }
  return out;
}

}  // namespace wm::models::seedvr2
