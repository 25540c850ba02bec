#include "src/models/wan21_blocks.h"

#include <ATen/Config.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>

#include "src/base/error.h"

namespace wm::models::wan21 {

namespace {

constexpr double kNormEps = 1e-12;    // F.normalize's eps
constexpr int64_t kCausalFrames = 2;  // kt - 1 for every causal kernel of this model

struct Conv {
  at::Tensor weight;  // [out, in, kt, kh, kw]
  at::Tensor bias;    // [out]
};

at::Tensor conv(const at::Tensor& x, const Conv& c, at::IntArrayRef stride = {1, 1, 1},
                at::IntArrayRef padding = {0, 0, 0}) {
#if AT_MKLDNN_ENABLED()
  // LibTorch 1.13 sends CPU convs with few channels·frames·rows to a reference (vol2col + BLAS)
  // path that is 10–40× slower than oneDNN; call oneDNN directly for float32 on the CPU.
  if (x.is_cpu() && x.scalar_type() == at::kFloat) {
    return at::mkldnn_convolution(x, c.weight, c.bias, padding, stride, {1, 1, 1}, 1);
  }
#endif
  return at::conv3d(x, c.weight, c.bias, stride, padding);
}

// Fetches parameters in checkpoint order and hands out state slots.
class Builder {
 public:
  Builder(ParamSource& source, at::MemoryFormat memory_format)
      : source_(source), memory_format_(memory_format) {}

  at::Tensor param(const std::string& key, const std::vector<int64_t>& shape) {
    return source_.get(key, shape);
  }
  Conv conv3d(const std::string& prefix, int64_t out, int64_t in, int64_t kt, int64_t kh,
              int64_t kw) {
    Conv c;
    c.weight = param(prefix + ".weight", {out, in, kt, kh, kw});
    if (c.weight.defined()) c.weight = c.weight.contiguous(memory_format_);
    c.bias = param(prefix + ".bias", {out});
    return c;
  }
  // A per-frame 2-D conv stored as a (1, k, k) 3-D conv: no [B·T, C, H, W] reshuffling needed.
  Conv conv2d(const std::string& prefix, int64_t out, int64_t in, int64_t k) {
    Conv c;
    c.weight = param(prefix + ".weight", {out, in, k, k});
    if (c.weight.defined()) c.weight = c.weight.unsqueeze(2).contiguous(memory_format_);
    c.bias = param(prefix + ".bias", {out});
    return c;
  }
  // RMSNorm gamma ([C,1,1,1], or [C,1,1] in attention) as [1, C, 1, 1, 1] with √C folded in.
  at::Tensor gamma(const std::string& key, int64_t channels, int extra_dims) {
    std::vector<int64_t> shape(size_t(extra_dims) + 1, 1);
    shape[0] = channels;
    at::Tensor g = param(key, shape);
    if (g.defined())
      g = (g.reshape({1, channels, 1, 1, 1}) * std::sqrt(double(channels))).contiguous();
    return g;
  }
  int slot() { return slots_++; }
  int slots() const { return slots_; }
  at::MemoryFormat memory_format() const { return memory_format_; }

 private:
  ParamSource& source_;
  at::MemoryFormat memory_format_;
  int slots_ = 0;
};

// ‖x‖₂ over channels, [N, 1, T, H, W].
at::Tensor channel_norm(const at::Tensor& x) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous()) {
    // LibTorch 1.13's CPU reduction over dim 1 of a contiguous 5-D tensor is 10–25× slower than
    // accumulating the (contiguous) channel planes one at a time.
    at::Tensor first = x.select(1, 0);
    at::Tensor sum = first * first;
    for (int64_t c = 1; c < x.size(1); ++c) {
      at::Tensor plane = x.select(1, c);
      sum.addcmul_(plane, plane);
    }
    return sum.sqrt_().unsqueeze(1);
  }
  return x.norm(2, {1}, /*keepdim=*/true);
}

// out = x / max(‖x‖₂ over channels, eps) · γ√C, then SiLU when `silu`. `out` may be a view (the
// body of a padded buffer): the result is written in place, no temporary of x's size.
void rms_norm_into(const at::Tensor& x, const at::Tensor& gamma, at::Tensor out, bool silu) {
  at::Tensor norm = channel_norm(x).clamp_min_(kNormEps);
  at::div_out(out, x, norm);
  out.mul_(gamma);
  if (silu) at::silu_(out);
}

// A [1, C, n + T, H, W] buffer whose first n frames hold `history` (zeros when undefined) and
// whose body is left for the caller to fill.
at::Tensor history_buffer(const at::Tensor& x, const at::Tensor& history, int64_t n,
                          at::MemoryFormat memory_format) {
  at::Tensor buf = at::empty({x.size(0), x.size(1), n + x.size(2), x.size(3), x.size(4)},
                             x.options().memory_format(memory_format));
  at::Tensor head = buf.narrow(2, 0, n);
  if (history.defined()) {
    head.copy_(history);
  } else {
    head.zero_();
  }
  return buf;
}

// The last n frames of `buf` as their own tensor (so the buffer can be freed).
at::Tensor last_frames(const at::Tensor& buf, int64_t n, at::MemoryFormat memory_format) {
  return buf.narrow(2, buf.size(2) - n, n).clone(memory_format);
}

// Causal conv with kernel (3, kh, kw): two frames of history in front, spatial zero padding.
class CausalConv {
 public:
  CausalConv() = default;
  CausalConv(Builder& b, const std::string& prefix, int64_t out, int64_t in, int64_t kh)
      : conv_(b.conv3d(prefix, out, in, kCausalFrames + 1, kh, kh)),
        pad_(kh / 2),
        slot_(b.slot()),
        memory_format_(b.memory_format()) {}

  at::Tensor forward(const at::Tensor& x, SequenceState& st) const {
    at::Tensor buf = history_buffer(x, st.slots[slot_], kCausalFrames, memory_format_);
    buf.narrow(2, kCausalFrames, x.size(2)).copy_(x);
    return run(buf, st);
  }
  // forward(SiLU(RMSNorm(x))), normalising straight into the padded buffer.
  at::Tensor forward_norm_silu(const at::Tensor& x, const at::Tensor& gamma,
                               SequenceState& st) const {
    at::Tensor buf = history_buffer(x, st.slots[slot_], kCausalFrames, memory_format_);
    rms_norm_into(x, gamma, buf.narrow(2, kCausalFrames, x.size(2)), /*silu=*/true);
    return run(buf, st);
  }

 private:
  at::Tensor run(const at::Tensor& buf, SequenceState& st) const {
    st.slots[slot_] = last_frames(buf, kCausalFrames, memory_format_);
    return conv(buf, conv_, {1, 1, 1}, {0, pad_, pad_});
  }

  Conv conv_;
  int64_t pad_ = 0;
  int slot_ = -1;
  at::MemoryFormat memory_format_ = at::MemoryFormat::Contiguous;
};

}  // namespace

class Block {
 public:
  virtual ~Block() = default;
  virtual at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const = 0;
};

namespace {

// decoder.conv1 / encoder.conv1: a plain causal 3×3×3 conv.
class InputConv : public Block {
 public:
  InputConv(Builder& b, const std::string& prefix, int64_t out, int64_t in)
      : conv_(b, prefix, out, in, 3) {}
  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    return conv_.forward(x, st);
  }

 private:
  CausalConv conv_;
};

// y = conv2(SiLU(norm2(conv1(SiLU(norm1(x)))))) + shortcut(x).
class Residual : public Block {
 public:
  Residual(Builder& b, const std::string& p, int64_t in, int64_t out)
      : gamma1_(b.gamma(p + ".residual.0.gamma", in, 3)),
        conv1_(b, p + ".residual.2", out, in, 3),
        gamma2_(b.gamma(p + ".residual.3.gamma", out, 3)),
        conv2_(b, p + ".residual.6", out, out, 3) {
    if (in != out) shortcut_ = b.conv3d(p + ".shortcut", out, in, 1, 1, 1);
  }
  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    at::Tensor y = conv1_.forward_norm_silu(x, gamma1_, st);
    y = conv2_.forward_norm_silu(y, gamma2_, st);
    if (shortcut_.weight.defined()) {
      y.add_(conv(x, shortcut_));
    } else {
      y.add_(x);
    }
    return y;
  }

 private:
  at::Tensor gamma1_;
  CausalConv conv1_;
  at::Tensor gamma2_;
  CausalConv conv2_;
  Conv shortcut_;
};

// Single-head self-attention over the H·W pixels of each frame, plus the input.
class Attention : public Block {
 public:
  Attention(Builder& b, const std::string& p, int64_t c)
      : channels_(c),
        gamma_(b.gamma(p + ".norm.gamma", c, 2)),
        qkv_weight_(b.param(p + ".to_qkv.weight", {3 * c, c, 1, 1})),
        qkv_bias_(b.param(p + ".to_qkv.bias", {3 * c})),
        proj_weight_(b.param(p + ".proj.weight", {c, c, 1, 1})),
        proj_bias_(b.param(p + ".proj.bias", {c})) {
    if (qkv_weight_.defined()) qkv_weight_ = qkv_weight_.reshape({3 * c, c}).contiguous();
    if (proj_weight_.defined()) proj_weight_ = proj_weight_.reshape({c, c}).contiguous();
  }

  at::Tensor forward(at::Tensor x, SequenceState&, bool) const override {
    const int64_t c = channels_, t = x.size(2), h = x.size(3), w = x.size(4);
    at::Tensor n = at::empty_like(x);
    rms_norm_into(x, gamma_, n, /*silu=*/false);
    // Tokens [T, H·W, C] (a view when x is channels_last_3d).
    at::Tensor tokens = n.squeeze(0).permute({1, 2, 3, 0}).reshape({t, h * w, c});
    n.reset();
    at::Tensor qkv = at::linear(tokens, qkv_weight_, qkv_bias_);
    tokens.reset();
    at::Tensor o = attend(qkv.narrow(2, 0, c), qkv.narrow(2, c, c), qkv.narrow(2, 2 * c, c));
    qkv.reset();
    o = at::linear(o, proj_weight_, proj_bias_);
    at::Tensor out = at::empty_like(x);
    at::add_out(out, x, o.view({1, t, h, w, c}).permute({0, 4, 1, 2, 3}));
    return out;
  }

 private:
  // softmax(q kᵀ / √C) v per frame; q, k, v: [T, N, C]. Frames go in groups whose [n, N, N]
  // score matrices would fit in ~1 GiB: bounded memory on the matmul path (and on SDPA's math
  // fallback, e.g. for head widths the fused kernels lack), while a group still fills the device.
  static at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const int64_t t = q.size(0), tokens = q.size(1), c = q.size(2);
    const int64_t score_bytes = std::max<int64_t>(1, tokens * tokens * int64_t(q.element_size()));
    const int64_t group = std::max<int64_t>(1, (int64_t(1) << 30) / score_bytes);
    at::Tensor out = at::empty({t, tokens, c}, q.options());
    for (int64_t t0 = 0; t0 < t; t0 += group) {
      const int64_t n = std::min(group, t - t0);
      at::Tensor qs = q.narrow(0, t0, n), ks = k.narrow(0, t0, n), vs = v.narrow(0, t0, n);
      at::Tensor dst = out.narrow(0, t0, n);
#if TORCH_VERSION_MAJOR >= 2
      at::Tensor o =
          at::scaled_dot_product_attention(qs.unsqueeze(1), ks.unsqueeze(1), vs.unsqueeze(1))
              .squeeze(1);
      if (n == t) return o;  // one group: no copy
      dst.copy_(o);
#else
      at::Tensor scores = at::bmm(qs, ks.transpose(1, 2));
      scores.mul_(1.0 / std::sqrt(double(c)));
      scores = at::softmax(scores, -1);
      at::bmm_out(dst, scores, vs);
#endif
    }
    return out;
  }

  int64_t channels_;
  at::Tensor gamma_;
  at::Tensor qkv_weight_, qkv_bias_, proj_weight_, proj_bias_;
};

// Decoder resample: [temporal ×2 (upsample3d)], then per frame nearest ×2 and a 3×3 conv C → C/2.
class Upsample : public Block {
 public:
  Upsample(Builder& b, const std::string& p, int64_t c, bool temporal)
      : channels_(c),
        spatial_(b.conv2d(p + ".resample.1", c / 2, c, 3)),
        temporal_(temporal),
        memory_format_(b.memory_format()) {
    if (temporal) time_ = CausalConv(b, p + ".time_conv", 2 * c, c, 1);
  }

  at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const override {
    if (temporal_) x = upsample_time(x, st, first);
    const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
    x = at::upsample_nearest3d(x, {t, 2 * h, 2 * w});
    return conv(x, spatial_, {1, 1, 1}, {0, 1, 1});
  }

 private:
  // Sequence frame 0 passes through; every other frame f becomes (a_f, b_f) = the two channel
  // halves of the causal time conv over frames 1.. (frame 0 is not its context).
  at::Tensor upsample_time(const at::Tensor& x, SequenceState& st, bool first) const {
    const int64_t c = channels_, h = x.size(3), w = x.size(4);
    const int64_t keep = first ? 1 : 0, rest = x.size(2) - keep;
    at::Tensor out =
        at::empty({1, c, keep + 2 * rest, h, w}, x.options().memory_format(memory_format_));
    if (keep) out.narrow(2, 0, 1).copy_(x.narrow(2, 0, 1));
    if (rest > 0) {
      at::Tensor y = time_.forward(x.narrow(2, keep, rest), st);  // [1, 2C, rest, H, W]
      out.narrow(2, keep, 2 * rest)
          .view({1, c, rest, 2, h, w})
          .copy_(y.view({1, 2, c, rest, h, w}).permute({0, 2, 3, 1, 4, 5}));
    }
    return out;
  }

  int64_t channels_;
  Conv spatial_;
  bool temporal_;
  CausalConv time_;
  at::MemoryFormat memory_format_;
};

// Encoder resample: per frame zero-pad right/bottom and a 3×3 stride-2 conv, then (downsample3d)
// output frame 0 = input frame 0 and output j ≥ 1 = time conv over inputs (2j−2, 2j−1, 2j).
class Downsample : public Block {
 public:
  Downsample(Builder& b, const std::string& p, int64_t c, bool temporal)
      : spatial_(b.conv2d(p + ".resample.1", c, c, 3)),
        temporal_(temporal),
        memory_format_(b.memory_format()) {
    if (temporal) {
      time_ = b.conv3d(p + ".time_conv", c, c, 3, 1, 1);
      slot_ = b.slot();
    }
  }

  at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const override {
    x = conv(at::constant_pad_nd(x, {0, 1, 0, 1}), spatial_, {1, 2, 2});
    if (!temporal_) return x;
    // Inputs for the stride-2 time conv: [previous slice's last frame | x] (x alone at frame 0).
    const int64_t t = x.size(2);
    at::Tensor& last = st.slots[slot_];
    at::Tensor in;
    if (first) {
      in = x;
    } else {
      in = history_buffer(x, last, 1, memory_format_);
      in.narrow(2, 1, t).copy_(x);
    }
    last = last_frames(x, 1, memory_format_);
    const int64_t n = (in.size(2) - 1) / 2;
    if (!first) return conv(in, time_, {2, 1, 1});
    at::Tensor out = at::empty({1, x.size(1), 1 + n, x.size(3), x.size(4)},
                               x.options().memory_format(memory_format_));
    out.narrow(2, 0, 1).copy_(x.narrow(2, 0, 1));
    if (n > 0) out.narrow(2, 1, n).copy_(conv(in, time_, {2, 1, 1}));
    return out;
  }

 private:
  Conv spatial_;
  bool temporal_;
  Conv time_;
  int slot_ = -1;
  at::MemoryFormat memory_format_;
};

// RMSNorm · SiLU · causal 3×3×3 conv.
class Head : public Block {
 public:
  Head(Builder& b, const std::string& p, int64_t in, int64_t out)
      : gamma_(b.gamma(p + ".0.gamma", in, 3)), conv_(b, p + ".2", out, in, 3) {}
  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    return conv_.forward_norm_silu(x, gamma_, st);
  }

 private:
  at::Tensor gamma_;
  CausalConv conv_;
};

// Channel widths per stage (the official `dims`).
std::vector<int64_t> stage_dims(const Architecture& a, Task task) {
  std::vector<int64_t> dims;
  if (task == Task::kEncode) {
    dims.push_back(a.dim);
    for (int m : a.dim_mult) dims.push_back(int64_t(a.dim) * m);
  } else {
    dims.push_back(int64_t(a.dim) * a.dim_mult.back());
    for (auto it = a.dim_mult.rbegin(); it != a.dim_mult.rend(); ++it)
      dims.push_back(int64_t(a.dim) * *it);
  }
  return dims;
}

void add_middle(Builder& b, std::vector<std::unique_ptr<Block>>& blocks, const std::string& p,
                int64_t c) {
  blocks.push_back(std::make_unique<Residual>(b, p + ".0", c, c));
  blocks.push_back(std::make_unique<Attention>(b, p + ".1", c));
  blocks.push_back(std::make_unique<Residual>(b, p + ".2", c, c));
}

}  // namespace

Architecture Architecture::from(const ModelConfig& config) {
  Architecture a;
  a.dim = config.dim;
  a.z_dim = config.z_dim;
  a.dim_mult = config.dim_mult;
  a.num_res_blocks = config.num_res_blocks;
  a.temporal_down = config.temporal_downsample;
  const std::string where = "wan2.1-vae: ";
  if (a.dim < 1 || a.z_dim < 1) throw ModelError(where + "dim and z_dim must be positive");
  if (a.num_res_blocks < 1) throw ModelError(where + "num_res_blocks must be at least 1");
  if (a.dim_mult.size() < 2) throw ModelError(where + "dim_mult needs at least 2 entries");
  for (int m : a.dim_mult) {
    if (m < 1) throw ModelError(where + "dim_mult entries must be positive");
    if (a.dim * m % 2 != 0) throw ModelError(where + "dim * dim_mult must be even");
  }
  if (a.temporal_down.size() != a.dim_mult.size() - 1) {
    throw ModelError(where + "temporal_downsample needs " + std::to_string(a.dim_mult.size() - 1) +
                     " entries (one per resample), config has " +
                     std::to_string(a.temporal_down.size()));
  }
  a.spatial_factor = 1 << (a.dim_mult.size() - 1);
  a.temporal_factor = 1 << std::count(a.temporal_down.begin(), a.temporal_down.end(), true);
  return a;
}

Network::Network(const Architecture& a, Task task, ParamSource& params, const at::Tensor& mean,
                 const at::Tensor& std, at::MemoryFormat memory_format)
    : task_(task), memory_format_(memory_format), mean_(mean), std_(std) {
  Builder b(params, memory_format);
  const std::vector<int64_t> dims = stage_dims(a, task);
  const int stages = int(a.dim_mult.size());
  const int64_t z = a.z_dim;
  if (task == Task::kEncode) {
    blocks_.push_back(std::make_unique<InputConv>(b, "encoder.conv1", dims[0], 3));
    int index = 0;
    for (int i = 0; i < stages; ++i) {
      int64_t in = dims[size_t(i)];
      const int64_t out = dims[size_t(i) + 1];
      for (int r = 0; r < a.num_res_blocks; ++r) {
        blocks_.push_back(std::make_unique<Residual>(
            b, "encoder.downsamples." + std::to_string(index++), in, out));
        in = out;
      }
      if (i != stages - 1) {
        blocks_.push_back(std::make_unique<Downsample>(
            b, "encoder.downsamples." + std::to_string(index++), out, a.temporal_down[size_t(i)]));
      }
    }
    add_middle(b, blocks_, "encoder.middle", dims.back());
    blocks_.push_back(std::make_unique<Head>(b, "encoder.head", dims.back(), 2 * z));
    // Top-level conv1 (1×1×1, 2z → 2z); only mu, its first z output channels, is used.
    top_weight_ = b.param("conv1.weight", {2 * z, 2 * z, 1, 1, 1});
    top_bias_ = b.param("conv1.bias", {2 * z});
    if (top_weight_.defined()) {
      top_weight_ = top_weight_.narrow(0, 0, z).contiguous(memory_format);
      top_bias_ = top_bias_.narrow(0, 0, z).contiguous();
    }
  } else {
    top_weight_ = b.param("conv2.weight", {z, z, 1, 1, 1});
    top_bias_ = b.param("conv2.bias", {z});
    if (top_weight_.defined()) top_weight_ = top_weight_.contiguous(memory_format);
    blocks_.push_back(std::make_unique<InputConv>(b, "decoder.conv1", dims[0], z));
    add_middle(b, blocks_, "decoder.middle", dims[0]);
    int index = 0;
    for (int i = 0; i < stages; ++i) {
      const int64_t in = i == 0 ? dims[0] : dims[size_t(i)] / 2;
      const int64_t out = dims[size_t(i) + 1];
      for (int r = 0; r <= a.num_res_blocks; ++r) {
        blocks_.push_back(std::make_unique<Residual>(
            b, "decoder.upsamples." + std::to_string(index++), r == 0 ? in : out, out));
      }
      if (i != stages - 1) {
        const bool temporal = a.temporal_down[a.temporal_down.size() - 1 - size_t(i)];
        blocks_.push_back(std::make_unique<Upsample>(
            b, "decoder.upsamples." + std::to_string(index++), out, temporal));
      }
    }
    blocks_.push_back(std::make_unique<Head>(b, "decoder.head", dims.back(), 3));
  }
  slots_ = b.slots();
}

Network::~Network() = default;

at::Tensor Network::forward(at::Tensor x, SequenceState& state, bool first) const {
  if (state.slots.size() != size_t(slots_)) state.slots.resize(size_t(slots_));
  const Conv top{top_weight_, top_bias_};
  if (task_ == Task::kDecode) {
    x = conv(x.mul(std_).add_(mean_), top);
    for (const auto& block : blocks_) x = block->forward(std::move(x), state, first);
    return x;
  }
  for (const auto& block : blocks_) x = block->forward(std::move(x), state, first);
  x = conv(x, top);
  return x.sub_(mean_).div_(std_);
}

namespace {

// Records keys and shapes; hands out undefined tensors.
class Recorder : public ParamSource {
 public:
  Recorder(std::vector<ParamSpec>& out, Task task) : out_(out), task_(task) {}
  at::Tensor get(const std::string& key, const std::vector<int64_t>& shape) override {
    out_.push_back({key, shape, task_});
    return {};
  }

 private:
  std::vector<ParamSpec>& out_;
  Task task_;
};

}  // namespace

std::vector<ParamSpec> layout(const Architecture& arch) {
  std::vector<ParamSpec> specs;
  for (Task task : {Task::kEncode, Task::kDecode}) {
    Recorder recorder(specs, task);
    Network(arch, task, recorder, {}, {}, at::MemoryFormat::Contiguous);
  }
  return specs;
}

}  // namespace wm::models::wan21
