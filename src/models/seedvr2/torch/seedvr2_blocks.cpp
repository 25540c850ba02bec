#include "src/models/seedvr2/torch/seedvr2_blocks.h"

#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "src/base/error.h"
#include "src/exec/device_context.h"
#include "src/exec/search_gate_torch.h"
#include "src/models/kernels/torch/seedvr2_kernels.h"

namespace wm::models::seedvr2 {

constexpr double kNormEps = 1e-6;

// A copy of a host-resident slot's memory between host and device (StreamState::written,
// uploading). CUDA: `done` is recorded on the side stream after the copy; on the CPU the copy
// is done when the object exists.
struct HostCopy {
#ifdef WMBATCH_WITH_CUDA
  at::cuda::CUDAEvent done;
#endif
};

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

// One step of the network's execution order, the unit of time chunking.
struct Stage {
  enum Kind { kConvIn, kResnet, kAttention, kUpsample, kDownsample, kOut } kind = kConvIn;
  const Resnet* resnet = nullptr;
  const Upsample* upsample = nullptr;
  const Conv* down = nullptr;
  std::vector<int> slots;  // the state slots of its convs
};

Tuning Tuning::parse(const std::string& text) {
  Tuning t;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    auto number = [&](int64_t lo) {
      try {
        size_t used = 0;
        const long long v = std::stoll(value, &used);
        if (used == value.size() && v >= lo) return int64_t(v);
      } catch (const std::exception&) {
      }
      throw ModelError("seedvr2-vae: tuning " + key + ": bad value '" + value + "'");
    };
    if (key == "fused") {
      t.fused = number(0) != 0;
    } else if (key == "cudnn_benchmark") {
      t.cudnn_benchmark = number(0) != 0;
    } else if (key == "cudnn_benchmark_limit") {
      t.cudnn_benchmark_limit = int(number(0));
    } else if (key == "conv_frames") {
      t.conv_frames = int(number(-1));
    } else if (key == "work_mib") {
      t.work_mib = number(0);
    } else if (key == "host_state") {
      t.host_state = int(std::min<int64_t>(number(-1), 1));
    } else if (key == "device_state_mib") {
      t.device_state_mib = number(0);
    } else if (key == "oom_retry") {
      t.oom_retry = number(0) != 0;
    } else if (key == "phased") {
      t.phased = int(std::min<int64_t>(number(-1), 3));
    } else if (key == "host_mib") {
      t.host_bytes = number(0) << 20;
    } else if (key == "host_kib") {
      t.host_bytes = number(0) << 10;
    } else {
      throw ModelError(
          "seedvr2-vae: unknown tuning key '" + key +
          "' (fused, cudnn_benchmark, cudnn_benchmark_limit, conv_frames, work_mib, host_state, "
          "device_state_mib, oom_retry, phased, host_mib, host_kib)");
    }
  }
  return t;
}

std::string Tuning::str() const {
  std::ostringstream o;
  o << "fused=" << fused << ",cudnn_benchmark=" << cudnn_benchmark
    << ",cudnn_benchmark_limit=" << cudnn_benchmark_limit << ",conv_frames=" << conv_frames
    << ",work_mib=" << work_mib << ",host_state=" << host_state
    << ",device_state_mib=" << device_state_mib << ",oom_retry=" << oom_retry
    << ",phased=" << phased << ",host_kib=" << (host_bytes >> 10);
  return o.str();
}

namespace {

class Builder {
 public:
  Builder(const ParamGetter& param, int& slots) : param_(param), slots_(slots) {}
  // The resolution the next convs run at (a power of 2 of the network's input) and, per slot,
  // {input channels, frames kept, resolution}.
  int scale = 0;
  std::vector<std::array<int64_t, 3>> slot_info;
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
    if (causal && c.kt > c.st) {
      c.slot = slots_++;
      slot_info.push_back({c.w.size(1), c.kt - c.st, scale});
    }
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
                 at::MemoryFormat format, const Tuning& tuning)
    : arch_(arch),
      decoder_(decoder),
      format_(format),
      tuning_(tuning),
      fused_(tuning.fused && format == at::MemoryFormat::ChannelsLast3d) {
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
        ++b.scale;
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
        ++b.scale;
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
  for (const auto& [channels, keep, scale] : b.slot_info) {
    slot_info_.push_back({channels, keep, int(scale)});
  }
  // The execution order as stages (forward_chunks).
  auto add = [&](Stage::Kind kind, const Resnet* r = nullptr) {
    Stage st;
    st.kind = kind;
    st.resnet = r;
    stages_.push_back(st);
  };
  add(Stage::kConvIn);
  if (!decoder_) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      for (const Resnet& r : blocks_[i]) add(Stage::kResnet, &r);
      if (down_[i]) {
        add(Stage::kDownsample);
        stages_.back().down = down_[i].get();
      }
    }
  }
  add(Stage::kResnet, &mid_[0]);
  add(Stage::kAttention);
  add(Stage::kResnet, &mid_[1]);
  if (decoder_) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      for (const Resnet& r : blocks_[i]) add(Stage::kResnet, &r);
      if (up_[i]) {
        add(Stage::kUpsample);
        stages_.back().upsample = up_[i].get();
      }
    }
  }
  add(Stage::kOut);
  for (Stage& st : stages_) {
    auto use = [&](const Conv& c) {
      if (c.slot >= 0) st.slots.push_back(c.slot);
    };
    switch (st.kind) {
      case Stage::kConvIn:
        use(*conv_in_);
        break;
      case Stage::kResnet:
        use(st.resnet->conv1);
        use(st.resnet->conv2);
        break;
      case Stage::kUpsample:
        use(st.upsample->conv);
        break;
      case Stage::kDownsample:
        use(*st.down);
        break;
      case Stage::kOut:
        use(*conv_out_);
        break;
      case Stage::kAttention:
        break;
    }
  }
  // Phases (forward_phased): the decoder's top level starts at its last Upsample3D, whose conv
  // is the first of that level's slots.
  if (decoder_) {
    for (size_t i = 0; i < stages_.size(); ++i) {
      if (stages_[i].kind == Stage::kUpsample) split_ = i;
    }
  }
}

std::vector<size_t> Network::phase_starts(int phases) const {
  std::vector<size_t> starts = {0};
  if (split_ == 0 || phases < 2) return starts;
  // The level below the top (from its Upsample3D), if there is one.
  size_t below = 0;
  for (size_t i = 0; i < split_; ++i) {
    if (stages_[i].kind == Stage::kUpsample) below = i;
  }
  if (phases >= 4 && below > 0) starts.push_back(below);
  starts.push_back(split_);
  // After the top level's first resnet, if a stage follows it.
  if (phases >= 3 && split_ + 2 < stages_.size()) starts.push_back(split_ + 2);
  return starts;
}

size_t Network::stage_count() const { return stages_.size(); }

int64_t Network::stage_input_bytes(size_t index, int64_t h, int64_t w, int64_t element_size) const {
  int64_t frames = 1;  // per latent frame: the temporal upsamplers before the stage
  for (size_t i = 0; i < index && i < stages_.size(); ++i) {
    if (stages_[i].kind == Stage::kUpsample) frames *= stages_[i].upsample->z;
  }
  const Stage& st = stages_.at(index);
  int64_t channels = 0;
  int scale = 0;
  if (st.kind == Stage::kUpsample) {
    // Its conv runs after the ×2 unpacking: the input is one resolution below.
    channels = st.upsample->upscale.w.size(1);
    scale = slot_info_.at(size_t(st.upsample->conv.slot)).scale - 1;
  } else if (st.kind == Stage::kResnet) {
    channels = st.resnet->conv1.w.size(1);
    scale = slot_info_.at(size_t(st.resnet->conv1.slot)).scale;
  } else {
    return frames * largest_frame_bytes(h, w, element_size, stage_slots(index, index + 1));
  }
  const int64_t sh = decoder_ ? h << scale : h >> scale, sw = decoder_ ? w << scale : w >> scale;
  return frames * channels * sh * sw * element_size;
}

std::vector<char> Network::stage_slots(size_t begin, size_t end) const {
  std::vector<char> used(size_t(slots_), 0);
  for (size_t i = begin; i < end && i < stages_.size(); ++i) {
    for (int k : stages_[i].slots) used[size_t(k)] = 1;
  }
  return used;
}

// Sequence parallelism (a ring): the conv's memory (the last kt − st frames of the previous
// part's time-extended input) from history_from(), before the conv's first call of this rank's
// part; `like` has the conv's channels and frame size.
void Network::receive_memory(const Conv& c, const at::Tensor& like, StreamState& s) const {
  if (!s.halo || c.slot < 0) return;
  const int from = s.halo->history_from();
  if (from < 0) return;
  const size_t slot = size_t(c.slot);
  if (slot < s.received.size()) {
    if (s.received[slot]) return;  // a later chunk: the memory is this rank's own
    s.received[slot] = 1;
  }
  at::Tensor history = at::empty({1, like.size(1), c.kt - c.st, like.size(3), like.size(4)},
                                 like.options().memory_format(format_));
  s.halo->recv(from, history);
  s.memory[slot] = history;
  if (slot < s.written.size()) s.written[slot].reset();
}

// The conv's new memory to history_to() after its last call of this rank's part; this rank's
// next slice takes its memory from the rank before it, so it is dropped here.
void Network::send_memory(const Conv& c, StreamState& s) const {
  if (!s.halo || !s.sends || c.slot < 0) return;
  const int to = s.halo->history_to();
  if (to < 0) return;
  s.halo->send(to, s.memory[size_t(c.slot)].contiguous(format_));
  s.memory[size_t(c.slot)] = at::Tensor();
}

at::Tensor Network::conv(const Conv& c, at::Tensor x, StreamState& s, bool first) const {
  receive_memory(c, x, s);
  if (c.causal && c.kt > 1) {
    // Time padding: kt − 1 copies of the sequence's first frame, or what the previous slice left.
    at::Tensor head;
    if (first || c.slot < 0) {
      head = x.narrow(2, 0, 1).expand({-1, -1, c.kt - 1, -1, -1});
    } else {
      head = s.memory[size_t(c.slot)];
      if (head.device() != x.device()) {
        wait_written(c.slot, s);
        head = head.to(x.device());
      }
    }
    x = at::cat({head, x}, 2).contiguous(format_);
  }
  if (c.slot >= 0) {
    const int64_t keep = c.kt - c.st;
    at::Tensor kept = x.narrow(2, x.size(2) - keep, keep).clone();
    // The reference path keeps host state synchronously (a debugging path on CUDA).
    if (host_slot(c, s) && !kept.is_cpu()) kept = kept.to(at::kCPU);
    s.memory[size_t(c.slot)] = kept;
    if (size_t(c.slot) < s.written.size()) s.written[size_t(c.slot)].reset();
  }
  send_memory(c, s);
  if (c.down) x = at::constant_pad_nd(x, {0, 1, 0, 1}, 0).contiguous(format_);
  if (x.is_cpu() && x.scalar_type() == at::kFloat && format_ == at::MemoryFormat::Contiguous &&
      at::hasMKLDNN()) {
    // LibTorch sends small float32 3-D convs (N·C·T·H ≤ 20480) to its native CPU kernel, ~15×
    // slower here than oneDNN, which takes them all.
    return at::mkldnn_convolution(x.contiguous(), c.w, c.b, {0, c.pad, c.pad}, {c.st, c.ss, c.ss},
                                  {1, 1, 1}, 1);
  }
  const exec::SearchPass pass =
      exec::conv_search_pass(x, c.w, {0, c.pad, c.pad}, {c.st, c.ss, c.ss});
  return at::conv3d(x, c.w, c.b, {c.st, c.ss, c.ss}, {0, c.pad, c.pad});
}

namespace {

at::Tensor reference_group_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                                bool silu, int64_t G, at::MemoryFormat format) {
  // Statistics per frame and group (spec §2): over C/G channels × H × W of one frame.
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  if (format == at::MemoryFormat::ChannelsLast3d) {
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

}  // namespace

at::Tensor Network::group_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               bool silu) const {
  if (fused_) {
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(format_));
    norm_into(x, w, b, silu, out);
    return out;
  }
  return reference_group_norm(x, w, b, silu, arch_.norm_groups, format_);
}

void Network::norm_into(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool silu,
                        const at::Tensor& out) const {
  if (!cuda::group_norm(x, w, b, arch_.norm_groups, kNormEps, silu, out)) {
    out.copy_(reference_group_norm(x, w, b, silu, arch_.norm_groups, format_));
  }
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

// --- the fused path (channels-last networks) ---------------------------------------------------

namespace {

#ifdef WMBATCH_WITH_CUDA
// Frames [t0, t0 + n) of a [1, C, T, H, W] channels_last_3d tensor as a view with the strides of
// a packed tensor of its own size (cuDNN's packed-layout engines look at the batch stride).
at::Tensor packed_frames(const at::Tensor& t, int64_t t0, int64_t n) {
  at::Tensor v = t.narrow(2, t0, n);
  const int64_t c = v.size(1), h = v.size(3), w = v.size(4);
  return v.as_strided(v.sizes(), {n * h * w * c, 1, h * w * c, w * c, c}, v.storage_offset());
}
#endif

int64_t head_frames(const Conv& c) { return c.causal ? c.kt - 1 : 0; }

#ifdef WMBATCH_WITH_CUDA
// The streams of host-state copies and their pinned memory: the compute stream (current) and
// the side streams 0 (uploads) and 1 (write-backs) of the worker's context, or of the calling
// thread's direct context without a worker.
struct CopyStreams {
  c10::cuda::CUDAStream compute;
  exec::DeviceContext& context;
  c10::cuda::CUDAStream up, down;
  explicit CopyStreams(exec::DeviceContext* worker)
      : compute(c10::cuda::getCurrentCUDAStream()),
        context(exec::context_for(worker, at::Device(at::kCUDA, compute.device_index()))),
        up(context.side_stream(0)),
        down(context.side_stream(1)) {}
};
#endif

}  // namespace

bool Network::host_slot(const Conv& c, const StreamState& s) const {
  return c.slot >= 0 && !s.halo && size_t(c.slot) < s.on_host.size() &&
         s.on_host[size_t(c.slot)] != 0;
}

void Network::wait_written(int slot, StreamState& s) const {
  if (size_t(slot) >= s.written.size() || !s.written[size_t(slot)]) return;
#ifdef WMBATCH_WITH_CUDA
  if (s.memory[size_t(slot)].is_cpu()) s.written[size_t(slot)]->done.synchronize();
#endif
}

at::Tensor Network::conv_buffer(const Conv& c, int64_t channels, int64_t frames, int64_t h,
                                int64_t w, const at::TensorOptions& options, StreamState& s,
                                bool first) const {
  at::Tensor buffer =
      at::empty({1, channels, head_frames(c) + frames, h, w}, options.memory_format(format_));
  const int64_t head = head_frames(c);
  if (first || head == 0 || !host_slot(c, s) || !s.memory[size_t(c.slot)].defined() ||
      !s.memory[size_t(c.slot)].is_cpu()) {
    return buffer;  // conv_buffered fills the time padding
  }
  // A host slot's memory comes up into the time padding now, beside the norm that fills the
  // rest of the buffer.
  const size_t slot = size_t(c.slot);
  at::Tensor pad = buffer.narrow(2, 0, head);
  auto copy = std::make_shared<HostCopy>();
#ifdef WMBATCH_WITH_CUDA
  if (buffer.is_cuda()) {
    const CopyStreams streams(s.context);
    // The buffer's memory may have had earlier users on the compute stream, and the host copy
    // may still be on its way down.
    at::cuda::CUDAEvent allocated;
    allocated.record(streams.compute);
    allocated.block(streams.up);
    if (s.written[slot]) s.written[slot]->done.block(streams.up);
    {
      const c10::cuda::CUDAStreamGuard guard(streams.up);
      pad.copy_(s.memory[slot], /*non_blocking=*/true);
    }
    copy->done.record(streams.up);
    s.uploading[slot] = std::move(copy);
    return buffer;
  }
#endif
  pad.copy_(s.memory[slot]);
  s.uploading[slot] = std::move(copy);
  return buffer;
}

void Network::write_back(int index, const at::Tensor& frames, StreamState& s) const {
  const size_t slot = size_t(index);
#ifdef WMBATCH_WITH_CUDA
  if (frames.is_cuda()) {
    const CopyStreams streams(s.context);
    at::cuda::CUDAEvent computed;
    computed.record(streams.compute);
    computed.block(streams.down);
    auto copy = std::make_shared<HostCopy>();
    at::Tensor host;
    {
      const c10::cuda::CUDAStreamGuard guard(streams.down);
      host = streams.context.host_empty_like(frames, at::MemoryFormat::Preserve);
      host.copy_(frames, /*non_blocking=*/true);
      copy->done.record(streams.down);
    }
    // The frames are part of a buffer the compute stream frees soon: keep its memory until the
    // copy has run.
    frames.record_stream(streams.down);
    s.memory[slot] = host;
    s.written[slot] = std::move(copy);
    return;
  }
#endif
  s.memory[slot] = frames.clone(format_);
  s.written[slot].reset();
}

void Network::park(StreamState& s, const std::vector<char>& which) const {
  for (size_t k = 0; k < s.memory.size() && k < which.size(); ++k) {
    if (which[k] && s.memory[k].defined() && !s.memory[k].is_cpu()) {
      write_back(int(k), s.memory[k], s);
    }
  }
}

// `buffer`: [1, C, kt − 1 + T, H, W] with the slice's T input frames after kt − 1 free ones,
// which get the time padding here (spec §2, §5); then the conv (stride 1 in time).
at::Tensor Network::conv_buffered(const Conv& c, at::Tensor buffer, StreamState& s,
                                  bool first) const {
  const int64_t head = head_frames(c);
  receive_memory(c, buffer, s);
  if (head > 0) {
    at::Tensor pad = buffer.narrow(2, 0, head);
    if (c.slot >= 0 && size_t(c.slot) < s.uploading.size() && s.uploading[size_t(c.slot)]) {
      // conv_buffer started the upload of a host slot's memory into the padding.
#ifdef WMBATCH_WITH_CUDA
      if (buffer.is_cuda()) {
        s.uploading[size_t(c.slot)]->done.block(c10::cuda::getCurrentCUDAStream());
      }
#endif
      s.uploading[size_t(c.slot)].reset();
    } else if (first || c.slot < 0) {
      pad.copy_(buffer.narrow(2, head, 1).expand_as(pad));
    } else {
      const at::Tensor& memory = s.memory[size_t(c.slot)];
      bool async = false;
      if (memory.device() != buffer.device()) {
        // Parked (or made host-resident by an earlier plan): it comes back here.
#ifdef WMBATCH_WITH_CUDA
        if (buffer.is_cuda() && memory.is_pinned()) {
          const size_t slot = size_t(c.slot);
          if (slot < s.written.size() && s.written[slot]) {
            s.written[slot]->done.block(c10::cuda::getCurrentCUDAStream());
          }
          async = true;
        }
#endif
        if (!async) wait_written(c.slot, s);
      }
      pad.copy_(memory, /*non_blocking=*/async);
    }
  }
  if (c.slot >= 0) {
    const int64_t keep = c.kt - c.st;
    const at::Tensor kept = buffer.narrow(2, buffer.size(2) - keep, keep);
    at::Tensor& memory = s.memory[size_t(c.slot)];
    if (host_slot(c, s)) {
      write_back(c.slot, kept, s);
    } else if (s.in_place && !s.halo && memory.defined() && memory.device() == kept.device() &&
               memory.sizes() == kept.sizes() && memory.dtype() == kept.dtype()) {
      // The old memory is in the buffer's padding already (above, same stream).
      memory.copy_(kept);
    } else {
      memory = kept.clone(format_);
      if (size_t(c.slot) < s.written.size()) s.written[size_t(c.slot)].reset();
    }
  }
  send_memory(c, s);
#ifdef WMBATCH_WITH_CUDA
  if (buffer.is_cuda() && c.st == 1 && c.ss == 1) {
    const int64_t kt = c.w.size(2), kh = c.w.size(3), kw = c.w.size(4);
    const int64_t t_out = buffer.size(2) - kt + 1;
    const int64_t h_out = buffer.size(3) + 2 * c.pad - kh + 1;
    const int64_t w_out = buffer.size(4) + 2 * c.pad - kw + 1;
    at::Tensor y = at::empty({1, c.w.size(0), t_out, h_out, w_out},
                             buffer.options().memory_format(at::MemoryFormat::ChannelsLast3d));
    const bool benchmark = at::globalContext().benchmarkCuDNN();
    const bool tf32 =
        buffer.scalar_type() == at::kFloat ? at::globalContext().allowTF32CuDNN() : true;
    // At most 16 output frames and < 2^31 input elements per call (as measured for wan2.1-vae:
    // larger calls gained nothing, and cuDNN's autotuning of > 2^31-element shapes took minutes).
    int64_t step = tuning_.conv_frames;
    if (step == 0) {
      const int64_t per_frame = buffer.size(1) * buffer.size(3) * buffer.size(4);
      step = std::clamp<int64_t>(((int64_t(1) << 31) - 1) / per_frame - (kt - 1), 1, 16);
    }
    if (step < 0) step = t_out;
    for (int64_t t0 = 0; t0 < t_out; t0 += step) {
      const int64_t n = std::min(step, t_out - t0);
      at::Tensor out = packed_frames(y, t0, n);
      const at::Tensor in = packed_frames(buffer, t0, n + kt - 1);
      const exec::SearchPass pass = exec::conv_search_pass(in, c.w, {0, c.pad, c.pad});
      at::cudnn_convolution_out(out, in, c.w, {0, c.pad, c.pad}, {1, 1, 1}, {1, 1, 1}, 1, benchmark,
                                /*deterministic=*/false, tf32);
    }
    buffer = at::Tensor();
    y.add_(c.b.view({1, -1, 1, 1, 1}));
    return y;
  }
#endif
  const exec::SearchPass pass =
      exec::conv_search_pass(buffer, c.w, {0, c.pad, c.pad}, {c.st, c.ss, c.ss});
  return at::conv3d(buffer, c.w, c.b, {c.st, c.ss, c.ss}, {0, c.pad, c.pad});
}

// A 1×1×1 conv as one GEMM over the pixels (channels-last: [pixels, C] rows).
at::Tensor Network::pointwise(const Conv& c, const at::Tensor& x) const {
  const int64_t cin = x.size(1), cout = c.w.size(0);
  const int64_t T = x.size(2), H = x.size(3), W = x.size(4);
  const at::Tensor rows = x.permute({0, 2, 3, 4, 1}).reshape({T * H * W, cin});
  const at::Tensor y = at::addmm(c.b, rows, c.w.view({cout, cin}).t());
  return y.view({1, T, H, W, cout}).permute({0, 4, 1, 2, 3});
}

at::Tensor Network::resnet_fused(const Resnet& r, at::Tensor x, StreamState& s, bool first) const {
  const int64_t T = x.size(2), H = x.size(3), W = x.size(4);
  const at::TensorOptions options = x.options();
  at::Tensor buffer = conv_buffer(r.conv1, x.size(1), T, H, W, options, s, first);
  norm_into(x, r.norm1_w, r.norm1_b, true, buffer.narrow(2, head_frames(r.conv1), T));
  // An input only this stage holds (wider than the shortcut's output) goes now: the shortcut
  // first (the same values as after the convs).
  at::Tensor skip;
  if (r.shortcut && x.use_count() == 1 && x.storage().use_count() == 1) {
    skip = pointwise(*r.shortcut, x);
    x = at::Tensor();
  }
  at::Tensor h = conv_buffered(r.conv1, std::move(buffer), s, first);
  buffer = conv_buffer(r.conv2, h.size(1), T, H, W, options, s, first);
  norm_into(h, r.norm2_w, r.norm2_b, true, buffer.narrow(2, head_frames(r.conv2), T));
  h = at::Tensor();
  at::Tensor y = conv_buffered(r.conv2, std::move(buffer), s, first);
  if (skip.defined()) {
    y.add_(skip);
  } else if (r.shortcut) {
    y.add_(pointwise(*r.shortcut, x));
  } else {
    y.add_(x);
  }
  return y;
}

// upscale_conv as a GEMM, then one strided copy unpacks its channels straight into the time
// padded buffer of the conv after it (dropping the duplicate head frame there).
at::Tensor Network::upsample_fused(const Upsample& u, at::Tensor x, StreamState& s,
                                   bool first) const {
  const int64_t C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4), z = u.z;
  const at::TensorOptions options = x.options();
  at::Tensor y = pointwise(u.upscale, x);  // [1, 4zC, T, H, W], channels-last
  x = at::Tensor();
  const bool drop = z == 2 && first;
  const int64_t frames = T * z - (drop ? 1 : 0);
  at::Tensor buffer = conv_buffer(u.conv, C, frames, 2 * H, 2 * W, options, s, first);
  // [frames, 2H, 2W, C] and [T, H, W, a, b, c, C] (channel ((a·2 + b)·z + c)·C + ch).
  const at::Tensor dst = buffer.narrow(2, head_frames(u.conv), frames).permute({0, 2, 3, 4, 1})[0];
  const at::Tensor src = y.permute({0, 2, 3, 4, 1})[0].view({T, H, W, 2, 2, z, C});
  int64_t t0 = 0, f0 = 0;
  if (drop) {
    dst.narrow(0, 0, 1)
        .view({1, H, 2, W, 2, C})
        .permute({0, 1, 3, 2, 4, 5})
        .copy_(src.narrow(0, 0, 1).select(5, 0));
    t0 = 1;
    f0 = 1;
  }
  if (T > t0) {
    dst.narrow(0, f0, (T - t0) * z)
        .view({T - t0, z, H, 2, W, 2, C})
        .permute({0, 2, 4, 3, 5, 1, 6})
        .copy_(src.narrow(0, t0, T - t0));
  }
  y = at::Tensor();
  return conv_buffered(u.conv, std::move(buffer), s, first);
}

at::Tensor Network::run_stage(const Stage& st, at::Tensor x, StreamState& s, bool first) const {
  switch (st.kind) {
    case Stage::kConvIn: {
      if (!fused_) return conv(*conv_in_, x.contiguous(format_), s, first);
      at::Tensor buffer =
          conv_buffer(*conv_in_, x.size(1), x.size(2), x.size(3), x.size(4), x.options(), s, first);
      buffer.narrow(2, head_frames(*conv_in_), x.size(2)).copy_(x);
      return conv_buffered(*conv_in_, std::move(buffer), s, first);
    }
    case Stage::kResnet:
      return fused_ ? resnet_fused(*st.resnet, std::move(x), s, first)
                    : resnet(*st.resnet, x, s, first);
    case Stage::kAttention:
      return attention(*attention_, x);
    case Stage::kUpsample:
      return fused_ ? upsample_fused(*st.upsample, std::move(x), s, first)
                    : upsample(*st.upsample, x, s, first);
    case Stage::kDownsample:
      return conv(*st.down, x, s, first);
    case Stage::kOut: {
      at::Tensor y;
      if (fused_) {
        at::Tensor buffer = conv_buffer(*conv_out_, x.size(1), x.size(2), x.size(3), x.size(4),
                                        x.options(), s, first);
        norm_into(x, norm_out_w_, norm_out_b_, true,
                  buffer.narrow(2, head_frames(*conv_out_), x.size(2)));
        y = conv_buffered(*conv_out_, std::move(buffer), s, first);
      } else {
        y = conv(*conv_out_, group_norm(x, norm_out_w_, norm_out_b_, true), s, first);
      }
      if (decoder_) return y;
      const int64_t L = arch_.latent_channels;
      return at::cat({y.narrow(1, 0, L), y.narrow(1, L, L).clamp(-30.0, 20.0)}, 1);
    }
  }
  return x;
}

// Working memory of a stage per input frame (bytes): what it allocates, not its input.
int64_t Network::stage_bytes_per_frame(const Stage& st, const at::Tensor& x) const {
  const int64_t e = int64_t(x.element_size()), C = x.size(1), px = x.size(3) * x.size(4);
  switch (st.kind) {
    case Stage::kConvIn:
      return (C + 2 * conv_in_->w.size(0)) * px * e;
    case Stage::kResnet:
      return (C + 4 * st.resnet->conv1.w.size(0)) * px * e;
    case Stage::kAttention:
      return 6 * C * px * e;
    case Stage::kUpsample:
      return 12 * st.upsample->z * C * px * e;
    case Stage::kDownsample:
      return 3 * C * px * e;
    case Stage::kOut:
      return 2 * C * px * e;
  }
  return C * px * e;
}

void Network::run_from(size_t index, size_t end, at::Tensor x, StreamState& s, bool first,
                       int64_t work_bytes,
                       const std::function<void(const at::Tensor&)>& emit) const {
  if (index == end) {
    emit(x);
    return;
  }
  const Stage& st = stages_[index];
  if (st.kind == Stage::kDownsample && st.down->st > 1) {
    // A temporal downsampler runs whole stride windows: the sequence's head chunk 1 + a multiple
    // of the stride (at once), later frames gather (StreamState::waiting) until they fill the
    // chunk the budget allows this stage, or the call's frames end (s.sends: no more come),
    // then run in multiples of the stride. So the stages before may run chunks of any length
    // and the stages after still get chunks as large as the budget allows.
    const int64_t stride = st.down->st;
    std::vector<at::Tensor>& waiting = s.waiting.at(index);
    int64_t L = x.size(2);
    for (const at::Tensor& w : waiting) L += w.size(2);
    int64_t take = 0;
    if (first) {
      take = 1 + (L - 1) / stride * stride;
    } else if (s.sends || work_bytes <= 0 ||
               L * std::max<int64_t>(stage_bytes_per_frame(st, x), 1) >= work_bytes) {
      take = L / stride * stride;
    }
    if (take == 0) {
      waiting.push_back(std::move(x));
      return;
    }
    if (!waiting.empty()) {
      waiting.push_back(std::move(x));
      x = at::cat(waiting, 2).contiguous(format_);
      waiting.clear();
    }
    if (take < L) {
      waiting.push_back(x.narrow(2, take, L - take).clone(at::MemoryFormat::Preserve));
      x = x.narrow(2, 0, take);
    }
  }
  const int64_t T = x.size(2);
  int64_t n = T;
  if (work_bytes > 0) {
    const int64_t per = std::max<int64_t>(stage_bytes_per_frame(st, x), 1);
    if (per * T > work_bytes) n = std::max<int64_t>(1, work_bytes / per);
  }
  if (n >= T) {
    at::Tensor y = run_stage(st, std::move(x), s, first);
    x = at::Tensor();
    run_from(index + 1, end, std::move(y), s, first, work_bytes, emit);
    return;
  }
  // Time chunks, each through the remaining stages before the next (exact: every causal conv
  // still sees its frames in order, with its state carried). Chunks may have any length; a
  // temporal downsampler gathers whole stride windows (above) and cuts only between them. A
  // sequence-parallel rank's convs hand their memory on in the last chunk only.
  const int64_t stride = st.kind == Stage::kDownsample ? st.down->st : 1;
  const bool sends = s.sends;
  for (int64_t t0 = 0; t0 < T;) {
    const bool head = first && t0 == 0;
    int64_t len = n;
    if (stride > 1) {  // whole stride windows (the head: 1 + a multiple)
      len = head ? 1 + (n - 1) / stride * stride : std::max(stride, n / stride * stride);
    }
    len = std::min(len, T - t0);
    s.sends = sends && t0 + len >= T;
    run_from(index + 1, end, run_stage(st, x.narrow(2, t0, len), s, head), s, head, work_bytes,
             emit);
    t0 += len;
  }
  s.sends = sends;
}

void Network::forward_chunks(const at::Tensor& input, StreamState& state, bool first,
                             int64_t work_bytes,
                             const std::function<void(const at::Tensor&)>& emit) const {
  size_state(state);
  run_from(0, stages_.size(), input.contiguous(format_), state, first, work_bytes, emit);
  check_drained(state);
}

namespace {

// A chunk of the phase boundary's activations in host memory; CUDA: `done` after its copy down.
struct Spooled {
  at::Tensor host;
  std::shared_ptr<HostCopy> copy;
};

}  // namespace

void Network::forward_phased(const at::Tensor& input, StreamState& s, bool first,
                             const std::vector<size_t>& starts, const std::vector<int64_t>& work,
                             const std::function<void(const at::Tensor&)>& emit) const {
  size_state(s);
  const size_t phases = starts.size();
  auto budget = [&](size_t p) -> int64_t {
    return work.empty() ? 0 : work[std::min(p, work.size() - 1)];
  };
  if (phases <= 1) {
    run_from(0, stages_.size(), input.contiguous(format_), s, first, budget(0), emit);
    check_drained(s);
    return;
  }
  // Every other phase's device-resident memory to host memory. It must have left before its
  // device memory serves this phase (the allocator reuses a block when the copy's event has
  // passed): the host waits for those copies (once per phase; ~0.15 s for 7 GB).
  auto park_all_but = [&](const std::vector<char>& mine) {
    std::vector<char> others(mine.size());
    for (size_t k = 0; k < mine.size(); ++k) others[k] = !mine[k];
    park(s, others);
    for (size_t k = 0; k < others.size(); ++k) {
      if (others[k]) wait_written(int(k), s);
    }
  };
  // A phase's output chunk to host memory.
  auto spool_one = [&](std::vector<Spooled>& spool, const at::Tensor& y) {
    Spooled part;
    part.copy = std::make_shared<HostCopy>();
#ifdef WMBATCH_WITH_CUDA
    if (y.is_cuda()) {
      const CopyStreams streams(s.context);
      at::cuda::CUDAEvent computed;
      computed.record(streams.compute);
      computed.block(streams.down);
      {
        const c10::cuda::CUDAStreamGuard guard(streams.down);
        try {
          part.host = streams.context.host_empty_like(y, format_);
        } catch (const c10::Error& e) {
          // Not a crash without a reason: the host's pinned memory ran out (the session bounds
          // what the phases hold by Tuning::host_mib; other processes may have taken the rest).
          throw ModelError("seedvr2-vae: could not allocate " + std::to_string(y.nbytes() >> 20) +
                           " MiB of pinned host memory for a phase's output (set tuning " +
                           "host_mib lower, or free host memory): " + e.what_without_backtrace());
        }
        part.host.copy_(y, /*non_blocking=*/true);
        part.copy->done.record(streams.down);
      }
      y.record_stream(streams.down);
      spool.push_back(std::move(part));
      return;
    }
#endif
    part.host = y;
    spool.push_back(std::move(part));
  };
  // Frame i of a spool (part, frame) back on the device; CUDA: on side stream 0, `done` after.
  using Frame = std::pair<at::Tensor, std::shared_ptr<HostCopy>>;
  auto bring = [&](const Spooled& part, int64_t t) -> Frame {
    const at::Tensor src = part.host.narrow(2, t, 1);
    auto copy = std::make_shared<HostCopy>();
#ifdef WMBATCH_WITH_CUDA
    if (input.is_cuda()) {
      const CopyStreams streams(s.context);
      at::Tensor x = at::empty(src.sizes(), input.options().memory_format(format_));
      at::cuda::CUDAEvent allocated;
      allocated.record(streams.compute);
      allocated.block(streams.up);
      part.copy->done.block(streams.up);
      {
        const c10::cuda::CUDAStreamGuard guard(streams.up);
        x.copy_(src, /*non_blocking=*/true);
      }
      copy->done.record(streams.up);
      return {x, copy};
    }
#endif
    return {src.to(input.device()).contiguous(format_), copy};
  };
  std::vector<Spooled> spool;
  for (size_t p = 0; p < phases; ++p) {
    const size_t begin = starts[p], end = p + 1 < phases ? starts[p + 1] : stages_.size();
    park_all_but(stage_slots(begin, end));
    std::vector<Spooled> out;
    std::function<void(const at::Tensor&)> to_spool = [&](const at::Tensor& y) {
      spool_one(out, y);
    };
    const auto& sink = p + 1 < phases ? to_spool : emit;
    if (p == 0) {
      run_from(0, end, input.contiguous(format_), s, first, budget(p), sink);
      spool = std::move(out);
      continue;
    }
    // Over the spool one frame at a time (the stages that need phases run single frames);
    // frame i + 1 comes up while frame i computes.
    std::vector<std::pair<size_t, int64_t>> frames;  // (spool part, frame)
    for (size_t k = 0; k < spool.size(); ++k) {
      for (int64_t t = 0; t < spool[k].host.size(2); ++t) frames.emplace_back(k, t);
    }
    Frame next;
    if (!frames.empty()) next = bring(spool[frames[0].first], frames[0].second);
    for (size_t i = 0; i < frames.size(); ++i) {
      at::Tensor x = std::move(next.first);
#ifdef WMBATCH_WITH_CUDA
      if (x.is_cuda()) next.second->done.block(c10::cuda::getCurrentCUDAStream());
#endif
      next =
          i + 1 < frames.size() ? bring(spool[frames[i + 1].first], frames[i + 1].second) : Frame{};
      // A spool part whose last frame is up is no longer needed (its pinned block goes back to
      // the allocator once the copy has run).
      Spooled& part = spool[frames[i].first];
      if (frames[i].second + 1 == part.host.size(2)) part.host = at::Tensor();
      const bool sends = s.sends;
      s.sends = sends && i + 1 == frames.size();
      run_from(begin, end, std::move(x), s, first && i == 0, budget(p), sink);
      s.sends = sends;
    }
    spool = std::move(out);
  }
  check_drained(s);
}

void Network::size_state(StreamState& state) const {
  state.memory.resize(size_t(slots_));
  state.written.resize(size_t(slots_));
  state.uploading.assign(size_t(slots_), nullptr);
  state.received.resize(size_t(slots_), 0);  // cleared per call by the session
  state.waiting.assign(stages_.size(), {});
}

void Network::check_drained(StreamState& state) const {
  for (const std::vector<at::Tensor>& waiting : state.waiting) {
    int64_t left = 0;
    for (const at::Tensor& w : waiting) left += w.size(2);
    if (left == 0) continue;
    state.waiting.assign(stages_.size(), {});
    throw ModelError("seedvr2-vae: " + std::to_string(left) +
                     " frames left over at a temporal downsampler: an encoder slice after the " +
                     "sequence's first needs a multiple of " +
                     std::to_string(arch_.temporal_factor()) + " frames");
  }
}

int64_t Network::slot_bytes(int slot, int64_t h, int64_t w, int64_t element_size) const {
  const SlotInfo& i = slot_info_.at(size_t(slot));
  // Decoder: ×2 per upsampler; encoder: each downsampler halves (rounding down) the size.
  const int64_t sh = decoder_ ? h << i.scale : h >> i.scale;
  const int64_t sw = decoder_ ? w << i.scale : w >> i.scale;
  return i.channels * i.keep * sh * sw * element_size;
}

std::vector<char> Network::host_slots(int64_t h, int64_t w, int64_t element_size,
                                      int64_t device_bytes, const std::vector<char>& among) const {
  std::vector<char> host(size_t(slots_), 0);
  int64_t on_device = 0;
  std::vector<int> order;
  for (int k = 0; k < slots_; ++k) {
    if (!among.empty() && (size_t(k) >= among.size() || !among[size_t(k)])) continue;
    order.push_back(k);
    on_device += slot_bytes(k, h, w, element_size);
  }
  // Lowest resolution first (decoder: smallest scale; encoder: largest), then execution order.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int sa = slot_info_[size_t(a)].scale, sb = slot_info_[size_t(b)].scale;
    return decoder_ ? sa < sb : sa > sb;
  });
  for (int k : order) {
    if (on_device <= device_bytes) break;
    host[size_t(k)] = 1;
    on_device -= slot_bytes(k, h, w, element_size);
  }
  return host;
}

int64_t Network::largest_frame_bytes(int64_t h, int64_t w, int64_t element_size,
                                     const std::vector<char>& among) const {
  int64_t most = 0;
  for (int k = 0; k < slots_; ++k) {
    if (!among.empty() && (size_t(k) >= among.size() || !among[size_t(k)])) continue;
    most = std::max(most, slot_bytes(k, h, w, element_size) / slot_info_[size_t(k)].keep);
  }
  return most;
}

at::Tensor Network::forward(const at::Tensor& input, StreamState& state, bool first) const {
  if (fused_) {
    std::vector<at::Tensor> parts;
    forward_chunks(input, state, first, 0, [&](const at::Tensor& y) { parts.push_back(y); });
    return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
  }
  size_state(state);
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
