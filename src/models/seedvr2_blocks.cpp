#include "src/models/seedvr2_blocks.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>

namespace wm::models::seedvr2 {

constexpr double kNormEps = 1e-6;

// A causal Conv3d (spec §2). `down`: Downsample3D's conv (zero pad one column right and one row
// at the bottom, spatial stride 2, no spatial padding). `causal` false: upscale_conv (plain).
struct Conv {
  at::Tensor w, b;
  int64_t kt = 1, st = 1, ss = 1, pad = 0;
  bool down = false;
  bool causal = true;
  int slot = -1;  // state slot when kt > st
};

struct Resnet {
  at::Tensor norm1_w, norm1_b, norm2_w, norm2_b;
  Conv conv1, conv2;
  std::unique_ptr<Conv> shortcut;
};

struct Attention {
  at::Tensor norm_w, norm_b, q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;
};

struct Upsample {
  Conv upscale;  // 1×1×1, C → C·4·z
  Conv conv;     // causal 3×3×3
  int64_t z = 1;
};

namespace {

class Builder {
 public:
  Builder(const ParamGetter& param, int& slots) : param_(param), slots_(slots) {}
  at::Tensor get(const std::string& key) const { return param_(key); }
  Conv conv(const std::string& name, int64_t stride_t = 1, bool down = false, bool causal = true) {
    Conv c;
    c.w = get(name + ".weight");
    c.b = get(name + ".bias");
    c.kt = c.w.size(2);
    c.st = stride_t;
    c.down = down;
    c.causal = causal;
    c.ss = down ? 2 : 1;
    c.pad = down ? 0 : c.w.size(3) / 2;
    if (causal && c.kt > c.st) c.slot = slots_++;
    return c;
  }
  Resnet resnet(const std::string& name, bool shortcut) {
    Resnet r;
    r.norm1_w = get(name + ".norm1.weight");
    r.norm1_b = get(name + ".norm1.bias");
    r.conv1 = conv(name + ".conv1");
    r.norm2_w = get(name + ".norm2.weight");
    r.norm2_b = get(name + ".norm2.bias");
    r.conv2 = conv(name + ".conv2");
    if (shortcut) r.shortcut = std::make_unique<Conv>(conv(name + ".conv_shortcut"));
    return r;
  }
  std::unique_ptr<Attention> attention(const std::string& name) {
    auto a = std::make_unique<Attention>();
    a->norm_w = get(name + ".group_norm.weight");
    a->norm_b = get(name + ".group_norm.bias");
    a->q_w = get(name + ".to_q.weight");
    a->q_b = get(name + ".to_q.bias");
    a->k_w = get(name + ".to_k.weight");
    a->k_b = get(name + ".to_k.bias");
    a->v_w = get(name + ".to_v.weight");
    a->v_b = get(name + ".to_v.bias");
    a->out_w = get(name + ".to_out.0.weight");
    a->out_b = get(name + ".to_out.0.bias");
    return a;
  }

 private:
  const ParamGetter& param_;
  int& slots_;
};

}  // namespace

Network::~Network() = default;

Network::Network(const Architecture& arch, bool decoder, const ParamGetter& param,
                 at::MemoryFormat format)
    : arch_(arch), decoder_(decoder), format_(format) {
  arch_.validate();
  Builder b(param, slots_);
  const int n = arch_.levels();
  const std::vector<int64_t>& c = arch_.channels;
  // Built in execution order, so state slots number the causal convs as they run.
  if (!decoder_) {
    conv_in_ = std::make_unique<Conv>(b.conv("encoder.conv_in"));
    for (int i = 0; i < n; ++i) {
      const std::string block = "encoder.down_blocks." + std::to_string(i);
      std::vector<Resnet> resnets;
      int64_t in = i == 0 ? c[0] : c[size_t(i) - 1];
      for (int j = 0; j < arch_.layers_per_block; ++j) {
        resnets.push_back(b.resnet(block + ".resnets." + std::to_string(j), in != c[size_t(i)]));
        in = c[size_t(i)];
      }
      blocks_.push_back(std::move(resnets));
      if (i < n - 1) {
        const bool temporal = arch_.down_temporal(i);
        down_.push_back(std::make_unique<Conv>(
            b.conv(block + ".downsamplers.0.conv", temporal ? 2 : 1, /*down=*/true)));
      } else {
        down_.push_back(nullptr);
      }
    }
    mid_.push_back(b.resnet("encoder.mid_block.resnets.0", false));
    attention_ = b.attention("encoder.mid_block.attentions.0");
    mid_.push_back(b.resnet("encoder.mid_block.resnets.1", false));
    norm_out_w_ = b.get("encoder.conv_norm_out.weight");
    norm_out_b_ = b.get("encoder.conv_norm_out.bias");
    conv_out_ = std::make_unique<Conv>(b.conv("encoder.conv_out"));
  } else {
    conv_in_ = std::make_unique<Conv>(b.conv("decoder.conv_in"));
    mid_.push_back(b.resnet("decoder.mid_block.resnets.0", false));
    attention_ = b.attention("decoder.mid_block.attentions.0");
    mid_.push_back(b.resnet("decoder.mid_block.resnets.1", false));
    int64_t prev = c[size_t(n) - 1];
    for (int i = 0; i < n; ++i) {
      const std::string block = "decoder.up_blocks." + std::to_string(i);
      const int64_t width = c[size_t(n - 1 - i)];
      std::vector<Resnet> resnets;
      int64_t in = prev;
      for (int j = 0; j < arch_.layers_per_block + 1; ++j) {
        resnets.push_back(b.resnet(block + ".resnets." + std::to_string(j), in != width));
        in = width;
      }
      blocks_.push_back(std::move(resnets));
      if (i < n - 1) {
        auto u = std::make_unique<Upsample>();
        u->z = arch_.up_temporal(i) ? 2 : 1;
        u->upscale = b.conv(block + ".upsamplers.0.upscale_conv", 1, false, /*causal=*/false);
        u->conv = b.conv(block + ".upsamplers.0.conv");
        up_.push_back(std::move(u));
      } else {
        up_.push_back(nullptr);
      }
      prev = width;
    }
    norm_out_w_ = b.get("decoder.conv_norm_out.weight");
    norm_out_b_ = b.get("decoder.conv_norm_out.bias");
    conv_out_ = std::make_unique<Conv>(b.conv("decoder.conv_out"));
  }
}

at::Tensor Network::conv(const Conv& c, at::Tensor x, StreamState& s, bool first) const {
  if (c.causal && c.kt > 1) {
    // Time padding: kt − 1 copies of the sequence's first frame, or what the previous slice left.
    at::Tensor head;
    if (first || c.slot < 0) {
      head = x.narrow(2, 0, 1).expand({-1, -1, c.kt - 1, -1, -1});
    } else {
      head = s.memory[size_t(c.slot)];
    }
    x = at::cat({head, x}, 2).contiguous(format_);
  }
  if (c.slot >= 0) {
    const int64_t keep = c.kt - c.st;
    s.memory[size_t(c.slot)] = x.narrow(2, x.size(2) - keep, keep).clone();
  }
  if (c.down) x = at::constant_pad_nd(x, {0, 1, 0, 1}, 0).contiguous(format_);
  if (x.is_cpu() && x.scalar_type() == at::kFloat && format_ == at::MemoryFormat::Contiguous &&
      at::hasMKLDNN()) {
    // LibTorch sends small float32 3-D convs (N·C·T·H ≤ 20480) to its native CPU kernel, ~15×
    // slower here than oneDNN, which takes them all.
    return at::mkldnn_convolution(x.contiguous(), c.w, c.b, {0, c.pad, c.pad}, {c.st, c.ss, c.ss},
                                  {1, 1, 1}, 1);
  }
  return at::conv3d(x, c.w, c.b, {c.st, c.ss, c.ss}, {0, c.pad, c.pad});
}

at::Tensor Network::group_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               bool silu) const {
  // Statistics per frame and group (spec §2): over C/G channels × H × W of one frame.
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t G = arch_.norm_groups;
  if (format_ == at::MemoryFormat::ChannelsLast3d) {
    // Stored (B, T, H, W, C): groups are runs of C/G adjacent values, so the statistics of a frame
    // and group are a reduction over (H·W, C/G) of a view, and the layout never changes (LibTorch's
    // CUDA GroupNorm would copy to NCHW and back). Normalisation and affine fold into one
    // per-(frame, channel) scale and shift: y = v·scale + shift, one pass.
    const at::Tensor v = x.permute({0, 2, 3, 4, 1}).reshape({B, T, H * W, G, C / G});
    const at::Tensor vf = v.scalar_type() == at::kDouble ? v : v.to(at::kFloat);
    auto [var, mean] = at::var_mean(vf, {2, 4}, /*unbiased=*/false, /*keepdim=*/true);
    const at::Tensor scale =
        at::rsqrt(var + kNormEps) * w.to(vf.scalar_type()).view({1, 1, 1, G, C / G});
    const at::Tensor shift = b.to(vf.scalar_type()).view({1, 1, 1, G, C / G}) - mean * scale;
    at::Tensor y = at::addcmul(shift, vf, scale);
    if (silu) at::silu_(y);
    return y.to(x.scalar_type()).view({B, T, H, W, C}).permute({0, 4, 1, 2, 3});
  }
  const at::Tensor v = x.contiguous().view({B, G, C / G, T, H * W});
  const at::Tensor vf =
      v.scalar_type() == at::kFloat || v.scalar_type() == at::kDouble ? v : v.to(at::kFloat);
  auto [var, mean] = at::var_mean(vf, {2, 4}, /*unbiased=*/false, /*keepdim=*/true);
  at::Tensor y = (vf - mean) * at::rsqrt(var + kNormEps);
  y = y.view({B, C, T, H, W}) * w.to(y.scalar_type()).view({1, C, 1, 1, 1}) +
      b.to(y.scalar_type()).view({1, C, 1, 1, 1});
  if (silu) y = at::silu(y);
  return y.to(x.scalar_type());
}

at::Tensor Network::resnet(const Resnet& r, const at::Tensor& x, StreamState& s, bool first) const {
  at::Tensor h = conv(r.conv1, group_norm(x, r.norm1_w, r.norm1_b, true), s, first);
  h = conv(r.conv2, group_norm(h, r.norm2_w, r.norm2_b, true), s, first);
  const at::Tensor skip = r.shortcut ? conv(*r.shortcut, x, s, first) : x;
  return skip + h;
}

at::Tensor Network::attention(const Attention& a, const at::Tensor& x) const {
  // One head of width C over the pixels of each frame (spec §2); no attention across frames.
  const int64_t C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4), N = H * W;
  const at::Tensor n = group_norm(x, a.norm_w, a.norm_b, false);
  const at::Tensor tokens = n.squeeze(0).permute({1, 2, 3, 0}).reshape({T, N, C});
  const at::Tensor q = at::linear(tokens, a.q_w, a.q_b);
  const at::Tensor k = at::linear(tokens, a.k_w, a.k_b);
  const at::Tensor v = at::linear(tokens, a.v_w, a.v_b);
  at::Tensor out;
  bool fused = false;
#if TORCH_VERSION_MAJOR >= 2
  if (x.is_cuda()) {
    fused = true;
    // CUDA: PyTorch's fused attention over all frames at once (one head of width C: the flash and
    // cuDNN kernels refuse 512, the memory-efficient one takes it), default scale 1/√C.
    out =
        at::scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)).squeeze(1);
  }
#endif
  const double scale = 1.0 / std::sqrt(double(C));
  if (!out.defined()) out = at::empty_like(q);
  // Scores of at most ~64 Mi elements at a time: query rows in chunks, frame by frame.
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 26) / std::max<int64_t>(N, 1));
  for (int64_t t = 0; t < T && !fused; ++t) {
    const at::Tensor kt = k[t].transpose(0, 1);
    for (int64_t r = 0; r < N; r += rows) {
      const int64_t m = std::min(rows, N - r);
      const at::Tensor scores = at::matmul(q[t].narrow(0, r, m), kt) * scale;
      const at::Tensor p =
          at::softmax(scores, -1, scores.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
      out[t].narrow(0, r, m).copy_(at::matmul(p.to(v.scalar_type()), v[t]));
    }
  }
  const at::Tensor o = at::linear(out, a.out_w, a.out_b);
  return x + o.view({T, H, W, C}).permute({3, 0, 1, 2}).unsqueeze(0);
}

at::Tensor Network::upsample(const Upsample& u, const at::Tensor& x, StreamState& s,
                             bool first) const {
  const int64_t C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4), z = u.z;
  at::Tensor y = conv(u.upscale, x, s, first);  // [1, 4zC, T, H, W]
  // Channel ((a·2 + b)·z + c)·C + ch → channel ch, frame t·z + c, row 2y + a, column 2x + b.
  if (format_ == at::MemoryFormat::ChannelsLast3d) {
    // Stored (1, T, H, W, 4zC): one copy into (1, Tz, 2H, 2W, C), channels-last again.
    y = y.permute({0, 2, 3, 4, 1})
            .reshape({1, T, H, W, 2, 2, z, C})
            .permute({0, 1, 6, 2, 4, 3, 5, 7})
            .reshape({1, T * z, 2 * H, 2 * W, C})
            .permute({0, 4, 1, 2, 3});
  } else {
    y = y.view({1, 2, 2, z, C, T, H, W})
            .permute({0, 4, 5, 3, 6, 1, 7, 2})
            .reshape({1, C, T * z, 2 * H, 2 * W});
  }
  if (z == 2 && first) {
    // The sequence's first latent frame gives one frame, not two: drop output frame 1.
    y = at::cat({y.narrow(2, 0, 1), y.narrow(2, 2, y.size(2) - 2)}, 2).contiguous(format_);
  }
  return conv(u.conv, y, s, first);
}

at::Tensor Network::forward(const at::Tensor& input, StreamState& state, bool first) const {
  if (int(state.memory.size()) != slots_) state.memory.resize(size_t(slots_));
  at::Tensor x = conv(*conv_in_, input.contiguous(format_), state, first);
  if (!decoder_) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      for (const Resnet& r : blocks_[i]) x = resnet(r, x, state, first);
      if (down_[i]) x = conv(*down_[i], x, state, first);
    }
    x = resnet(mid_[0], x, state, first);
    x = attention(*attention_, x);
    x = resnet(mid_[1], x, state, first);
    x = conv(*conv_out_, group_norm(x, norm_out_w_, norm_out_b_, true), state, first);
    const int64_t L = arch_.latent_channels;
    return at::cat({x.narrow(1, 0, L), x.narrow(1, L, L).clamp(-30.0, 20.0)}, 1);
  }
  x = resnet(mid_[0], x, state, first);
  x = attention(*attention_, x);
  x = resnet(mid_[1], x, state, first);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    for (const Resnet& r : blocks_[i]) x = resnet(r, x, state, first);
    if (up_[i]) x = upsample(*up_[i], x, state, first);
  }
  return conv(*conv_out_, group_norm(x, norm_out_w_, norm_out_b_, true), state, first);
}

}  // namespace wm::models::seedvr2
