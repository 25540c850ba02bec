#include "src/models/seedvr2/torch/seedvr2_dit.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "src/base/error.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/models/kernels/torch/seedvr2_dit_kernels.h"
#include "src/models/seedvr2/torch/seedvr2_dit_split.h"
#include "src/models/seedvr2/torch/seedvr2_dit_windows.h"
#include "src/models/torch/weights_file.h"

namespace wm::models::seedvr2 {
namespace {

constexpr double kNormEps = 1e-5;

// x / sqrt(mean(x²) + ε) over the last axis, float32.
at::Tensor rms(const at::Tensor& x) {
  const at::Tensor f = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  return f * at::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + kNormEps);
}

// RMSNorm(x) · scale + shift, in `dtype` (the next matrix product's).
at::Tensor modulate(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift,
                    at::ScalarType dtype) {
  return at::addcmul(shift, rms(x), scale).to(dtype);
}

// Dequantised float8 e4m3 bytes (kByte), or the tensor itself.
at::Tensor dequantised(const at::Tensor& t, at::ScalarType dtype) {
  if (!t.defined() || t.scalar_type() != at::kByte) return t;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return t.view(at::kFloat8_e4m3fn).to(dtype);
#else
  const at::Tensor lut =
      at::from_blob(const_cast<float*>(float8_e4m3_values()), {256}, at::kFloat).to(t.device());
  return lut.index_select(0, t.reshape({-1}).to(at::kInt)).view(t.sizes()).to(dtype);
#endif
}

// What a token grid and text length need, made once: the regular and shifted window plans
// and the text's angle tables (3B).
struct ShapePlans {
  std::mutex mutex;  // held while it is made; read-only once `ready`
  bool ready = false;
  WindowPlan plans[2];                 // regular, shifted
  std::map<int, RopeTable> text_rope;  // per RoPE frequency set
  // Sequence-parallel splits of the plans, per (rank, ranks): made on first use, under `mutex`.
  std::map<std::pair<int, int>, std::unique_ptr<DitSplit>> splits;
};

}  // namespace

struct DitNetwork::Block {
  struct Branch {
    at::Tensor qkv;               // [3·inner, dim]
    at::Tensor out_w, out_b;      // [dim, inner], [dim]
    at::Tensor norm_q, norm_k;    // [head_dim] float32
    at::Tensor mlp_in, mlp_in_b;  // SwiGLU: [2·hidden, dim], gate rows first; 7B: + bias
    at::Tensor mlp_out, mlp_out_b;
    at::Tensor ada;  // [dim, 6] float32: attn shift, scale, gate, mlp shift, scale, gate
  };
  Branch vid, txt;    // a shared block's txt holds the same tensors as vid
  int64_t bytes = 0;  // the weights' bytes as stored
};

struct DitNetwork::Impl {
  // Outside the blocks, on the device (matrices in the compute dtype, vectors float32).
  at::Tensor vid_in_w, vid_in_b, txt_in_w, txt_in_b;
  at::Tensor emb_w[3], emb_b[3];
  at::Tensor out_norm, out_shift, out_scale, out_w, out_b;
  // Per block: its weights as stored (device, or pinned host when streamed) and its RoPE
  // frequencies (float32, host), with the index of the first block that has the same ones.
  std::vector<Block> blocks;
  std::vector<at::Tensor> freqs;
  std::vector<at::Tensor> freqs_device;  // the same on the network's device
  std::vector<int> rope_id;
  // Window plans and angle tables per token grid and text length (t, h, w, L): made on the host
  // and uploaded once per shape, not per forward (an upload from pageable memory waits for the
  // device).
  mutable std::mutex plans_mutex;
  mutable std::map<std::array<int64_t, 4>, std::shared_ptr<ShapePlans>> plans;
  int resident = 0;  // blocks [0, resident) live on the device
  // Streaming ring (CUDA): device buffers per slot, filled on a copy stream.
  mutable std::mutex ring_mutex;
  mutable std::vector<Block> ring;
#ifdef WMBATCH_WITH_CUDA
  mutable std::vector<std::optional<at::cuda::CUDAEvent>> ring_ready, ring_free;
#endif
};

namespace {

at::Tensor to_storage(const at::Tensor& host, const DitOptions& o, bool matrix) {
  // Vectors (norm weights, modulation, biases) float32; matrices in the compute dtype, float8
  // ones stay float8 on CUDA (dequantised per block).
  if (!matrix) return host.to(o.device, at::kFloat).contiguous();
  if (host.scalar_type() == at::kByte) return host.to(o.device).contiguous();
  return host.to(o.device, o.dtype).contiguous();
}

}  // namespace

DitNetwork::DitNetwork(const DitArchitecture& arch, const DitParams& params,
                       const DitOptions& options)
    : arch_(arch), options_(options), impl_(std::make_unique<Impl>()) {
  arch_.validate();
#ifdef WMBATCH_WITH_CUDA
  // float32 means float32: no TF32 matrix products (process-wide: asked of the device layer).
  if (options_.device.is_cuda() && options_.dtype == at::kFloat) {
    exec::DeviceSettings settings;
    settings.exact_float32_matmuls = true;
    exec::device_layer().ask(settings);
  }
#endif
  Impl& m = *impl_;
  auto get = [&](const std::string& key) -> const at::Tensor& {
    const auto it = params.find(key);
    if (it == params.end()) throw ModelError("seedvr2 dit: parameter " + key + " is missing");
    return it->second;
  };
  const DitOptions& o = options_;
  // Matrices outside the blocks: small (txt_in the largest, 26 MiB in bf16 for 3B).
  auto matrix = [&](const std::string& key) {
    return dequantised(to_storage(get(key), o, true), o.dtype);
  };
  auto vector = [&](const std::string& key) { return to_storage(get(key), o, false); };
  m.vid_in_w = matrix("vid_in.proj.weight");
  m.vid_in_b = vector("vid_in.proj.bias");
  m.txt_in_w = matrix("txt_in.weight");
  m.txt_in_b = vector("txt_in.bias");
  const char* emb[3] = {"emb_in.proj_in", "emb_in.proj_hid", "emb_in.proj_out"};
  for (int k = 0; k < 3; ++k) {
    m.emb_w[k] = matrix(std::string(emb[k]) + ".weight");
    m.emb_b[k] = vector(std::string(emb[k]) + ".bias");
  }
  if (arch_.out_norm()) {
    m.out_norm = vector("vid_out_norm.weight");
    m.out_shift = vector("vid_out_ada.out_shift");
    m.out_scale = vector("vid_out_ada.out_scale");
  }
  m.out_w = matrix("vid_out.proj.weight");
  m.out_b = vector("vid_out.proj.bias");

  // Blocks: resident while they fit `resident_bytes` (CUDA), the rest in pinned host memory.
  DitOptions host_options = o;
  host_options.device = at::kCPU;
  int64_t budget = o.resident_bytes;
  for (int i = 0; i < arch_.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    // The block's size as stored decides where it lives.
    int64_t bytes = 0;
    for (const DitParam& param : dit_layout(arch_)) {
      if (param.block != i) continue;
      const at::Tensor& t = get(param.key);
      const bool is_matrix = t.dim() == 2;
      const int64_t elem = !is_matrix                     ? 4
                           : t.scalar_type() == at::kByte ? 1
                                                          : int64_t(c10::elementSize(o.dtype));
      bytes += t.numel() * elem;
    }
    const bool resident = !o.device.is_cuda() || budget < 0 || bytes <= budget;
    if (resident && budget >= 0) budget -= bytes;
    if (resident && i == m.resident) ++m.resident;
    const bool on_device = i < m.resident;
    const DitOptions& where = on_device ? o : host_options;
    auto place = [&](const at::Tensor& t, bool is_matrix) {
      at::Tensor s = to_storage(t, where, is_matrix);
      if (!on_device && o.device.is_cuda()) {
        // Streamed blocks wait in pinned host memory (the device layer's).
        at::Tensor pinned = exec::device_layer().direct_context(o.device).host_empty_like(
            s, at::MemoryFormat::Preserve);
        s = pinned.copy_(s);
      }
      return s;
    };
    Block b;
    b.bytes = bytes;
    auto branch = [&](const std::string& name) {
      Block::Branch br;
      br.qkv = place(get(p + "attn.proj_qkv." + name + ".weight"), true);
      br.out_w = place(get(p + "attn.proj_out." + name + ".weight"), true);
      br.out_b = place(get(p + "attn.proj_out." + name + ".bias"), false);
      br.norm_q = place(get(p + "attn.norm_q." + name + ".weight"), false);
      br.norm_k = place(get(p + "attn.norm_k." + name + ".weight"), false);
      const std::string mlp = p + "mlp." + name + ".";
      if (arch_.swiglu()) {
        // Gate and input projections as one matrix product.
        br.mlp_in = place(
            at::cat({get(mlp + "proj_in_gate.weight"), get(mlp + "proj_in.weight")}, 0), true);
      } else {
        br.mlp_in = place(get(mlp + "proj_in.weight"), true);
        br.mlp_in_b = place(get(mlp + "proj_in.bias"), false);
        br.mlp_out_b = place(get(mlp + "proj_out.bias"), false);
      }
      br.mlp_out = place(get(mlp + "proj_out.weight"), true);
      std::vector<at::Tensor> ada;
      for (const char* layer : {"attn", "mlp"}) {
        for (const char* what : {"shift", "scale", "gate"}) {
          ada.push_back(get(p + "ada." + name + "." + layer + "_" + what).to(at::kFloat));
        }
      }
      br.ada = place(at::stack(ada, 1), false);  // [dim, 6]
      return br;
    };
    if (arch_.separate(i)) {
      b.vid = branch("vid");
      b.txt = branch("txt");
    } else {
      b.vid = branch("all");
      b.txt = b.vid;
    }
    m.blocks.push_back(std::move(b));
    const at::Tensor f = get(p + "attn.rope.rope.freqs").to(at::kFloat).contiguous();
    int id = i;
    for (int j = 0; j < i; ++j) {
      if (m.rope_id[size_t(j)] == j && at::equal(m.freqs[size_t(j)], f)) {
        id = j;
        break;
      }
    }
    m.freqs.push_back(f);
    m.freqs_device.push_back(f.to(o.device));
    m.rope_id.push_back(id);
  }
}

DitNetwork::~DitNetwork() = default;

int DitNetwork::resident_blocks() const { return impl_->resident; }

int64_t DitNetwork::block_bytes() const {
  int64_t most = 0;
  for (const Block& b : impl_->blocks) most = std::max(most, b.bytes);
  return most;
}

at::Tensor timestep_sinusoid(double timestep) {
  // diffusers' get_timestep_embedding (flip_sin_to_cos false, shift 0) in float32 arithmetic:
  // exponent_i = (−ln 10000 · i) / 128, then exp, times t; [sin, cos].
  constexpr int64_t kHalf = 128;
  const at::Tensor exponent =
      at::arange(0, kHalf, at::kFloat) * float(-std::log(10000.0)) / float(kHalf);
  const at::Tensor angles = at::exp(exponent) * float(timestep);
  return at::cat({at::sin(angles), at::cos(angles)});
}

at::Tensor dit_rope_freqs(const DitArchitecture& arch) {
  const int64_t r = arch.rope_axis();
  if (arch.variant == DitVariant::k7B) {
    // rotary-embedding-torch "pixel": linspace(1, max_freq / 2, r / 2) · π, max_freq 256.
    return at::linspace(1.0, 128.0, arch.rope_freqs, at::kFloat) * float(M_PI);
  }
  // "lang": 1 / θ^(arange(0, r, 2) / r), θ = 10000, float32.
  const at::Tensor e = at::arange(0, r, 2, at::kFloat).narrow(0, 0, arch.rope_freqs) / float(r);
  return at::pow(10000.0, e).reciprocal();
}

DitParams random_dit_params(const DitArchitecture& arch, uint64_t seed, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  DitParams out;
  const auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  // Matrices larger than the pool are tiled from one pool of uniform draws, each from its own
  // offset: the official shapes hold billions of values, which one serial generator fills in
  // tens of seconds (the benchmark's whole time limit); the tiled copy runs at memory speed.
  // Smaller matrices (the golden sizes) get draws of their own.
  constexpr int64_t kPool = int64_t(1) << 22;
  at::Tensor pool;
  std::mt19937_64 offsets(seed);
  for (const DitParam& p : dit_layout(arch)) {
    if (ends(p.key, "rope.freqs")) {
      out[p.key] = dit_rope_freqs(arch);
      continue;
    }
    at::Tensor t;
    if (p.shape.size() == 2) {
      // In place, in the target dtype: the 7B's matrices are 33 GB as float32.
      const double bound = std::sqrt(3.0 / double(p.shape[1]));
      t = at::empty(p.shape, dtype);
      const int64_t n = t.numel();
      if (n <= kPool) {
        t.uniform_(-bound, bound, gen);
      } else {
        if (!pool.defined()) pool = at::rand({kPool}, gen, at::kFloat).mul_(2).sub_(1);
        at::Tensor flat = t.view({-1});
        int64_t from = int64_t(offsets() % uint64_t(kPool));
        for (int64_t pos = 0; pos < n;) {
          const int64_t len = std::min(n - pos, kPool - from);
          flat.narrow(0, pos, len).copy_(pool.narrow(0, from, len));
          pos += len;
          from = 0;
        }
        t.mul_(bound);
      }
      out[p.key] = t;
      continue;
    }
    const at::Tensor u = at::rand(p.shape, gen, at::kFloat) * 2 - 1;
    if (ends(p.key, ".bias")) {
      t = u * 0.1;
    } else if (ends(p.key, "_scale") || ends(p.key, ".weight")) {
      t = 1.0 + u * 0.25;  // norm weights and modulation scales
    } else {
      t = u * 0.25;  // shifts and gates
    }
    out[p.key] = t;
  }
  return out;
}

namespace {

// One forward's state: the device, the dtype, the angle tables of the text.
struct Pass {
  Pass(const DitArchitecture& a, const DitNetwork::Impl& impl, const DitOptions& options)
      : arch(a), m(impl), o(options) {}
  const DitArchitecture& arch;
  const DitNetwork::Impl& m;
  const DitOptions& o;
  // The fused CUDA passes apply (seedvr2_dit_kernels.h).
  bool fused = false;
  int64_t text = 0;  // L
  int64_t t = 0, h = 0, w = 0;
  ShapePlans* shape = nullptr;  // the network's plans for this grid and text length
  // The plans the blocks run (regular, shifted): the shape's, or this rank's part of them.
  const WindowPlan* plan[2] = {nullptr, nullptr};
  // Sequence parallelism inside the forward (null: one device runs every window).
  const DitSplit* split = nullptr;
  exec::HaloExchange* exchange = nullptr;
};

// The angles of one axis position for every frequency, in double.
void axis_angles(double position, const at::Tensor& freqs, double* out) {
  const float* f = freqs.data_ptr<float>();
  for (int64_t j = 0; j < freqs.numel(); ++j) out[j] = position * double(f[j]);
}

// cos and sin of [n, pairs] angles, as float32 [n, 1, pairs] on the device.
RopeTable rope_table(const std::vector<double>& angles, int64_t n, int64_t pairs,
                     at::Device device) {
  at::Tensor c = at::empty({n, 1, pairs}, at::kFloat), s = at::empty({n, 1, pairs}, at::kFloat);
  float* cp = c.data_ptr<float>();
  float* sp = s.data_ptr<float>();
  for (size_t i = 0; i < angles.size(); ++i) {
    cp[i] = float(std::cos(angles[i]));
    sp[i] = float(std::sin(angles[i]));
  }
  return {c.to(device), s.to(device)};
}

// linspace(−1, 1, n)[i] as torch computes it (the halves from each end).
double unit_linspace(int64_t i, int64_t n) {
  if (n <= 1) return -1.0;
  const double step = 2.0 / double(n - 1);
  return i < n / 2 ? -1.0 + step * double(i) : 1.0 - step * double(n - 1 - i);
}

// The angle table of a window shape (spec §7): 3B: axis t at L + it, h at iy, w at ix; 7B:
// linspace(−1, 1, window length) positions per axis.
RopeTable window_rope(const Pass& pass, const WindowGroup& g, const at::Tensor& freqs) {
  const int64_t f = freqs.numel(), pairs = 3 * f, n = g.tokens();
  std::vector<double> angles(size_t(n * pairs));
  const bool pixel = pass.arch.variant == DitVariant::k7B;
  int64_t k = 0;
  for (int64_t it = 0; it < g.nt; ++it) {
    for (int64_t iy = 0; iy < g.nh; ++iy) {
      for (int64_t ix = 0; ix < g.nw; ++ix, ++k) {
        double* a = angles.data() + k * pairs;
        if (pixel) {
          axis_angles(unit_linspace(it, g.nt), freqs, a);
          axis_angles(unit_linspace(iy, g.nh), freqs, a + f);
          axis_angles(unit_linspace(ix, g.nw), freqs, a + 2 * f);
        } else {
          axis_angles(double(pass.text + it), freqs, a);
          axis_angles(double(iy), freqs, a + f);
          axis_angles(double(ix), freqs, a + 2 * f);
        }
      }
    }
  }
  return rope_table(angles, n, pairs, pass.o.device);
}

// Text positions (p, p, p) (3B).
RopeTable text_rope(const Pass& pass, const at::Tensor& freqs) {
  const int64_t f = freqs.numel(), pairs = 3 * f;
  std::vector<double> angles(size_t(pass.text * pairs));
  for (int64_t p = 0; p < pass.text; ++p) {
    for (int axis = 0; axis < 3; ++axis) {
      axis_angles(double(p), freqs, angles.data() + p * pairs + axis * f);
    }
  }
  return rope_table(angles, pass.text, pairs, pass.o.device);
}

WindowPlan make_plan(int64_t t, int64_t h, int64_t w, bool shifted, at::Device device) {
  const std::vector<DitWindow> windows = dit_windows(int(t), int(h), int(w), shifted);
  // Windows of one shape next to each other, shapes in order of first appearance.
  std::vector<WindowGroup> groups;
  std::vector<std::vector<const DitWindow*>> members;
  for (const DitWindow& win : windows) {
    size_t g = 0;
    for (; g < groups.size(); ++g) {
      if (groups[g].nt == win.t.size() && groups[g].nh == win.h.size() &&
          groups[g].nw == win.w.size()) {
        break;
      }
    }
    if (g == groups.size()) {
      WindowGroup ng;
      ng.nt = win.t.size(), ng.nh = win.h.size(), ng.nw = win.w.size();
      groups.push_back(ng);
      members.emplace_back();
    }
    ++groups[g].windows;
    members[g].push_back(&win);
  }
  const int64_t n = t * h * w;
  at::Tensor order = at::empty({n}, at::kLong), inverse = at::empty({n}, at::kLong);
  int64_t* op = order.data_ptr<int64_t>();
  int64_t* ip = inverse.data_ptr<int64_t>();
  int64_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].offset = k;
    for (const DitWindow* win : members[g]) {
      for (int it = win->t.begin; it < win->t.end; ++it) {
        for (int iy = win->h.begin; iy < win->h.end; ++iy) {
          for (int ix = win->w.begin; ix < win->w.end; ++ix, ++k) {
            const int64_t token = (int64_t(it) * h + iy) * w + ix;
            op[k] = token;
            ip[token] = k;
          }
        }
      }
    }
  }
  WindowPlan plan;
  plan.order = order.to(device);
  plan.inverse = inverse.to(device);
  plan.groups = std::move(groups);
  plan.windows = int64_t(windows.size());
  return plan;
}

// Rotates the first 2·pairs channels of x [..., n, heads, head_dim] (float32) by the table's
// angles ([n, 1, pairs]): adjacent channels (2m, 2m + 1) are a pair; the rest pass through.
at::Tensor rotate(const at::Tensor& x, const RopeTable& table) {
  const int64_t pairs = table.cos.size(-1), hd = x.size(-1);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = pairs;
  shape.push_back(2);
  const at::Tensor xr = x.narrow(-1, 0, 2 * pairs).reshape(shape);
  const at::Tensor a = xr.select(-1, 0), b = xr.select(-1, 1);
  const at::Tensor ra = a * table.cos - b * table.sin;
  const at::Tensor rb = b * table.cos + a * table.sin;
  at::Tensor rotated = at::stack({ra, rb}, -1).flatten(-2);
  if (2 * pairs == hd) return rotated;
  return at::cat({rotated, x.narrow(-1, 2 * pairs, hd - 2 * pairs)}, -1);
}

// softmax(q kᵀ / √d) v per batch and head: q, k, v [B, S, heads, d] in the compute dtype →
// [B, S, heads, d].
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const DitOptions& o) {
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) {
    // Flash attention (bf16/fp16) or the memory-efficient kernel, default scale 1/√d.
    return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        .transpose(1, 2);
  }
#endif
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), d = q.size(3);
  const double scale = 1.0 / std::sqrt(double(d));
  at::Tensor out = at::empty_like(q);
  // Windows per call so that the scores stay under score_bytes.
  const int64_t per = std::max<int64_t>(1, o.score_bytes / std::max<int64_t>(1, H * S * S * 4));
  for (int64_t b = 0; b < B; b += per) {
    const int64_t m = std::min(per, B - b);
    const at::Tensor qt = q.narrow(0, b, m).transpose(1, 2).to(at::kFloat);
    const at::Tensor kt = k.narrow(0, b, m).transpose(1, 2).to(at::kFloat);
    const at::Tensor vt = v.narrow(0, b, m).transpose(1, 2).to(at::kFloat);
    const at::Tensor p = at::softmax(at::matmul(qt, kt.transpose(2, 3)) * scale, -1);
    out.narrow(0, b, m).copy_(at::matmul(p, vt).transpose(1, 2));
  }
  return out;
}

// RMSNorm over each head (its weight), float32: x [..., heads, head_dim].
at::Tensor norm_heads(const at::Tensor& x, const at::Tensor& weight) { return rms(x) * weight; }

// The packed layout of a plan (WindowPlan::Packed) for the fused path: video items in window
// order, then each window's text rows, with the RoPE positions of each item.
void make_packed(const Pass& pass, WindowPlan& plan) {
  WindowPlan::Packed& k = plan.packed;
  const int64_t L = pass.text, N = plan.order.numel();
  const bool pixel = pass.arch.variant == DitVariant::k7B;
  const at::Tensor order = plan.order.to(at::kCPU);
  const int64_t* op = order.data_ptr<int64_t>();
  std::vector<int32_t> vsrc(static_cast<size_t>(N)), vdest(static_cast<size_t>(N)), tsrc, tdest;
  std::vector<float> vpos(static_cast<size_t>(3 * N)), tpos;
  std::vector<int64_t> vrows(static_cast<size_t>(N)), trows;
  int64_t row = 0;
  for (const WindowGroup& g : plan.groups) {
    k.base.push_back(row);
    const int64_t n = g.tokens();
    for (int64_t b = 0; b < g.windows; ++b) {
      int64_t i = 0;
      for (int64_t it = 0; it < g.nt; ++it) {
        for (int64_t iy = 0; iy < g.nh; ++iy) {
          for (int64_t ix = 0; ix < g.nw; ++ix, ++i) {
            const int64_t at = g.offset + b * n + i;  // position in window order
            const int64_t token = op[at];
            vsrc[size_t(at)] = int32_t(token);
            vdest[size_t(at)] = int32_t(row + i);
            vrows[size_t(token)] = row + i;
            float* q = vpos.data() + 3 * at;
            if (pixel) {
              q[0] = float(unit_linspace(it, g.nt));
              q[1] = float(unit_linspace(iy, g.nh));
              q[2] = float(unit_linspace(ix, g.nw));
            } else {
              q[0] = float(L + it), q[1] = float(iy), q[2] = float(ix);
            }
          }
        }
      }
      for (int64_t p = 0; p < L; ++p) {
        tsrc.push_back(int32_t(p));
        tdest.push_back(int32_t(row + n + p));
        trows.push_back(row + n + p);
        for (int axis = 0; axis < 3; ++axis) tpos.push_back(float(p));
      }
      row += n + L;
    }
  }
  const at::Device dev = pass.o.device;
  auto up32 = [&](std::vector<int32_t>& v) {
    return at::from_blob(v.data(), {int64_t(v.size())}, at::kInt).to(dev);
  };
  auto upf = [&](std::vector<float>& v, int64_t rows) {
    return at::from_blob(v.data(), {rows, 3}, at::kFloat).to(dev);
  };
  auto up64 = [&](std::vector<int64_t>& v) {
    return at::from_blob(v.data(), {int64_t(v.size())}, at::kLong).to(dev);
  };
  k.rows = row;
  k.video_src = up32(vsrc), k.video_dest = up32(vdest), k.video_pos = upf(vpos, N);
  k.text_src = up32(tsrc), k.text_dest = up32(tdest), k.text_pos = upf(tpos, int64_t(tsrc.size()));
  k.video_rows = up64(vrows), k.text_rows = up64(trows);
  k.made = true;
}

// The text's outputs of every window of the layout ([windows, L, inner], window order) from those
// of this rank's windows: gathered from every rank when the forward is split.
at::Tensor every_window(const Pass& pass, int layout, const at::Tensor& mine) {
  if (!pass.split) return mine;
  const DitSplit::Layout& lay = pass.split->layout[layout];
  std::vector<int64_t> counts;
  for (size_t q = 0; q + 1 < lay.window_begin.size(); ++q) {
    counts.push_back(lay.window_begin[q + 1] - lay.window_begin[q]);
  }
  return gather_rows(mine.contiguous(), counts, *pass.exchange);
}

// Window attention on the fused path: q/k normalised, rotated and packed by one kernel per
// stream (video, text), one attention call per window shape over the packed rows, outputs
// gathered back. False when a kernel cannot take the tensors (the ATen path runs instead).
bool attention_fused(Pass& pass, const DitNetwork::Block& block, int index, const at::Tensor& hv,
                     const at::Tensor& hs, const WindowPlan& plan, at::Tensor& ov, at::Tensor& os) {
  const DitArchitecture& a = pass.arch;
  const at::ScalarType dtype = pass.o.dtype;
  const int64_t L = hs.size(0), H = a.heads, hd = a.head_dim, inner = a.inner();
  const WindowPlan::Packed& k = plan.packed;
  if (!k.made) return false;
  const at::Tensor& freqs = pass.m.freqs_device[size_t(index)];
  const at::Tensor qkv_v = at::linear(hv, block.vid.qkv).contiguous();
  const at::Tensor qkv_s = at::linear(hs, block.txt.qkv).contiguous();
  const at::TensorOptions opt = hv.options().dtype(dtype);
  at::Tensor qp = at::empty({k.rows, H, hd}, opt), kp = at::empty({k.rows, H, hd}, opt);
  at::Tensor vp = at::empty({k.rows, H, hd}, opt);
  if (!cuda::qkv_pack(qkv_v, k.video_src, k.video_dest, k.video_pos, block.vid.norm_q,
                      block.vid.norm_k, freqs, true, int(H), kNormEps, qp, kp, vp) ||
      !cuda::qkv_pack(qkv_s, k.text_src, k.text_dest, k.text_pos, block.txt.norm_q,
                      block.txt.norm_k, freqs, a.variant == DitVariant::k3B, int(H), kNormEps, qp,
                      kp, vp)) {
    return false;
  }
  at::Tensor out = at::empty({k.rows, inner}, opt);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const WindowGroup& group = plan.groups[g];
    const int64_t B = group.windows, S = group.tokens() + L;
    auto part = [&](const at::Tensor& x) {
      return x.narrow(0, k.base[g], B * S).view({B, S, H, hd});
    };
    const at::Tensor o = attend(part(qp), part(kp), part(vp), pass.o);  // [B, S, H, hd]
    out.narrow(0, k.base[g], B * S).view({B, S, H, hd}).copy_(o);
  }
  const at::Tensor text = every_window(
      pass, index % 2, out.index_select(0, k.text_rows).view({plan.windows, L, inner}));
  const at::Tensor text_sum = text.to(at::kFloat).sum(0);
  const at::Tensor text_out = (text_sum / double(text.size(0))).to(dtype);
  ov = at::linear(out.index_select(0, k.video_rows), block.vid.out_w, block.vid.out_b.to(dtype));
  os = at::linear(text_out, block.txt.out_w, block.txt.out_b.to(dtype));
  return true;
}

// Window attention of one block (spec §6): hv [N, dim], hs [L, dim] in the compute dtype →
// (video out [N, dim], text out [L, dim]) after proj_out, in the compute dtype.
std::pair<at::Tensor, at::Tensor> attention(Pass& pass, const DitNetwork::Block& block, int index,
                                            const at::Tensor& hv, const at::Tensor& hs) {
  const DitArchitecture& a = pass.arch;
  const at::ScalarType dtype = pass.o.dtype;
  const int64_t N = hv.size(0), L = hs.size(0), H = a.heads, hd = a.head_dim, inner = a.inner();
  const bool shifted = index % 2 == 1;
  // Made by prepare(); read-only here.
  const WindowPlan& plan = *pass.plan[shifted ? 1 : 0];
  if (pass.fused) {
    at::Tensor ov, os;
    if (attention_fused(pass, block, index, hv, hs, plan, ov, os)) return {ov, os};
  }
  const int rope = pass.m.rope_id[size_t(index)];
  const std::vector<RopeTable>& tables = plan.rope.at(rope);

  // Video q, k, v in window order; q and k normalised per head (float32).
  const at::Tensor qkv_v =
      at::linear(hv, block.vid.qkv).index_select(0, plan.order).view({N, 3, H, hd});
  const at::Tensor q_v = norm_heads(qkv_v.select(1, 0), block.vid.norm_q);
  const at::Tensor k_v = norm_heads(qkv_v.select(1, 1), block.vid.norm_k);
  const at::Tensor v_v = qkv_v.select(1, 2);
  const at::Tensor qkv_s = at::linear(hs, block.txt.qkv).view({L, 3, H, hd});
  at::Tensor q_s = norm_heads(qkv_s.select(1, 0), block.txt.norm_q);
  at::Tensor k_s = norm_heads(qkv_s.select(1, 1), block.txt.norm_k);
  const at::Tensor v_s = qkv_s.select(1, 2);
  if (a.variant == DitVariant::k3B) {
    const RopeTable& text = pass.shape->text_rope.at(rope);
    q_s = rotate(q_s, text);
    k_s = rotate(k_s, text);
  }
  q_s = q_s.to(dtype);
  k_s = k_s.to(dtype);

  at::Tensor out_w = at::empty({N, inner}, hv.options());
  std::vector<at::Tensor> texts;  // per group: [windows, L, inner] float32
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const WindowGroup& group = plan.groups[g];
    const int64_t B = group.windows, n = group.tokens();
    auto part = [&](const at::Tensor& x) {
      return x.narrow(0, group.offset, B * n).view({B, n, H, hd});
    };
    const at::Tensor qg = rotate(part(q_v), tables[g]).to(dtype);
    const at::Tensor kg = rotate(part(k_v), tables[g]).to(dtype);
    const at::Tensor q = at::cat({qg, q_s.unsqueeze(0).expand({B, L, H, hd})}, 1);
    const at::Tensor k = at::cat({kg, k_s.unsqueeze(0).expand({B, L, H, hd})}, 1);
    const at::Tensor v = at::cat({part(v_v), v_s.unsqueeze(0).expand({B, L, H, hd})}, 1);
    const at::Tensor o = attend(q, k, v, pass.o);  // [B, n + L, H, hd]
    out_w.narrow(0, group.offset, B * n).copy_(o.narrow(1, 0, n).reshape({B * n, inner}));
    texts.push_back(o.narrow(1, n, L).to(at::kFloat).reshape({B, L, inner}).contiguous());
  }
  // Each text token's output: the mean over all windows, summed shape by shape.
  const at::Tensor text = every_window(pass, shifted ? 1 : 0, at::cat(texts, 0));
  at::Tensor text_sum;
  int64_t first = 0;
  for (const WindowGroup& group : pass.shape->plans[shifted ? 1 : 0].groups) {
    const at::Tensor part = text.narrow(0, first, group.windows).sum(0);
    text_sum = text_sum.defined() ? text_sum + part : part;
    first += group.windows;
  }
  const at::Tensor text_out = (text_sum / double(text.size(0))).to(dtype);
  const at::Tensor ov =
      at::linear(out_w.index_select(0, plan.inverse), block.vid.out_w, block.vid.out_b.to(dtype));
  const at::Tensor os = at::linear(text_out, block.txt.out_w, block.txt.out_b.to(dtype));
  return {ov, os};
}

at::Tensor mlp(const Pass& pass, const DitNetwork::Block::Branch& br, const at::Tensor& x) {
  const DitArchitecture& a = pass.arch;
  if (a.swiglu()) {
    const at::Tensor both = at::linear(x, br.mlp_in);
    if (pass.fused) {
      const at::Tensor h = cuda::swiglu(both);
      if (h.defined()) return at::linear(h, br.mlp_out);
    }
    const int64_t hidden = both.size(-1) / 2;
    return at::linear(at::silu(both.narrow(-1, 0, hidden)) * both.narrow(-1, hidden, hidden),
                      br.mlp_out);
  }
  const at::ScalarType dtype = x.scalar_type();
  const at::Tensor hidden = at::gelu(at::linear(x, br.mlp_in, br.mlp_in_b.to(dtype)), "tanh");
  return at::linear(hidden, br.mlp_out, br.mlp_out_b.to(dtype));
}

// RMSNorm(x) · scale + shift in the compute dtype (scale, shift undefined: the plain norm).
at::Tensor norm_in(const Pass& pass, const at::Tensor& x, const at::Tensor& scale,
                   const at::Tensor& shift) {
  if (pass.fused) {
    at::Tensor y = cuda::rms_modulate(x, scale, shift, pass.o.dtype, kNormEps);
    if (y.defined()) return y;
  }
  if (!scale.defined()) return rms(x).to(pass.o.dtype);
  return modulate(x, scale, shift, pass.o.dtype);
}

// x (float32) += y · gate (gate undefined: 1).
void add_gated(const Pass& pass, at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  if (pass.fused && cuda::gated_add(x, y, gate)) return;
  if (gate.defined()) {
    x.addcmul_(y.to(at::kFloat), gate);
  } else {
    x.add_(y.to(at::kFloat));
  }
}

// One block (spec §5) on the float32 residual streams v [N, dim], s [L, dim], in place.
void run_block(Pass& pass, const DitNetwork::Block& block, int index, const at::Tensor& table,
               at::Tensor& v, at::Tensor& s) {
  const DitArchitecture& a = pass.arch;
  const bool tail = a.text_tail(index);
  // Columns: attn shift, scale, gate, mlp shift, scale, gate (contiguous: the kernels read them).
  const at::Tensor mv = (table + block.vid.ada).t().contiguous();  // [6, dim]
  const at::Tensor mt = (table + block.txt.ada).t().contiguous();
  const at::Tensor hv = norm_in(pass, v, mv[1], mv[0]);
  // The last 3B block uses the text as keys and values only: normalised, not modulated.
  const at::Tensor hs = tail ? norm_in(pass, s, {}, {}) : norm_in(pass, s, mt[1], mt[0]);
  const auto [ov, os] = attention(pass, block, index, hv, hs);
  add_gated(pass, v, ov, mv[2]);
  add_gated(pass, s, os, tail ? at::Tensor() : mt[2]);
  add_gated(pass, v, mlp(pass, block.vid, norm_in(pass, v, mv[4], mv[3])), mv[5]);
  if (!tail) add_gated(pass, s, mlp(pass, block.txt, norm_in(pass, s, mt[4], mt[3])), mt[5]);
}

// A block's tensors with float8 weights dequantised (those of a streamed block from its ring
// slot).
DitNetwork::Block usable(const DitNetwork::Block& b, at::ScalarType dtype) {
  DitNetwork::Block out = b;
  for (DitNetwork::Block::Branch* br : {&out.vid, &out.txt}) {
    for (at::Tensor* t : {&br->qkv, &br->out_w, &br->mlp_in, &br->mlp_out}) {
      *t = dequantised(*t, dtype);
    }
  }
  return out;
}

// Makes everything of pass.shape once (plans, angle tables, the packed layout of the fused path),
// so that forwards only read it.
void prepare(Pass& pass) {
  ShapePlans& sp = *pass.shape;
  std::lock_guard<std::mutex> lock(sp.mutex);
  if (sp.ready) return;
  for (int shifted = 0; shifted < 2; ++shifted) {
    WindowPlan& plan = sp.plans[shifted];
    plan = make_plan(pass.t, pass.h, pass.w, shifted == 1, pass.o.device);
    for (size_t i = 0; i < pass.m.rope_id.size(); ++i) {
      const int id = pass.m.rope_id[i];
      if (int(i) != id) continue;  // the first block of each frequency set
      for (const WindowGroup& g : plan.groups) {
        plan.rope[id].push_back(window_rope(pass, g, pass.m.freqs[i]));
      }
      if (shifted == 0 && pass.arch.variant == DitVariant::k3B) {
        sp.text_rope.emplace(id, text_rope(pass, pass.m.freqs[i]));
      }
    }
    if (pass.fused) make_packed(pass, plan);
  }
  sp.ready = true;
}

// This rank's part of pass.shape's plans (made once per rank and number of ranks), with its
// windows' angle tables and, on the fused path, its packing.
const DitSplit& split_of(const Pass& pass, int rank, int ranks) {
  ShapePlans& sp = *pass.shape;
  std::lock_guard<std::mutex> lock(sp.mutex);
  std::unique_ptr<DitSplit>& slot = sp.splits[{rank, ranks}];
  if (!slot) {
    auto split = std::make_unique<DitSplit>(make_dit_split(sp.plans, rank, ranks, pass.o.device));
    for (int l = 0; l < 2; ++l) {
      DitSplit::Layout& lay = split->layout[l];
      for (const auto& [id, tables] : sp.plans[l].rope) {
        for (size_t g : lay.group_of) lay.local.rope[id].push_back(tables[g]);
      }
      if (pass.fused) make_packed(pass, lay.local);
    }
    slot = std::move(split);
  }
  return *slot;
}

}  // namespace

at::Tensor DitNetwork::forward(const at::Tensor& vid_in, const at::Tensor& txt_in, double timestep,
                               const DitProbe& probe, exec::DeviceContext* context,
                               exec::HaloExchange* exchange) const {
  const DitArchitecture& a = arch_;
  const DitOptions& o = options_;
  const Impl& m = *impl_;
  const at::ScalarType dtype = o.dtype;
  if (vid_in.dim() != 4 || vid_in.size(3) != a.in_channels || vid_in.size(1) % 2 != 0 ||
      vid_in.size(2) % 2 != 0) {
    throw ModelError("seedvr2 dit: the video input must be [T, H, W, " +
                     std::to_string(a.in_channels) + "] with even H and W");
  }
  if (txt_in.dim() != 2 || txt_in.size(1) != a.txt_in_dim || txt_in.size(0) < 1) {
    throw ModelError("seedvr2 dit: the text embedding must be [L, " + std::to_string(a.txt_in_dim) +
                     "]");
  }
  const int64_t T = vid_in.size(0), H = vid_in.size(1), W = vid_in.size(2);
  Pass pass{a, m, o};
  pass.fused = o.fused && o.device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) &&
               cuda::dit_kernels_available();
  pass.text = txt_in.size(0);
  pass.t = T, pass.h = H / 2, pass.w = W / 2;
  // The plans of this shape (kept: batches of a video share it). One forward at a time uses them.
  std::shared_ptr<ShapePlans> shape;
  {
    std::lock_guard<std::mutex> lock(m.plans_mutex);
    const std::array<int64_t, 4> key{pass.t, pass.h, pass.w, pass.text};
    // A few shapes are kept (forwards still using a dropped one hold it).
    if (m.plans.size() >= 16 && !m.plans.count(key)) m.plans.clear();
    std::shared_ptr<ShapePlans>& slot = m.plans[key];
    if (!slot) slot = std::make_shared<ShapePlans>();
    shape = slot;
  }
  pass.shape = shape.get();
  prepare(pass);
  pass.plan[0] = &shape->plans[0], pass.plan[1] = &shape->plans[1];
  if (exchange && exchange->ranks() > 1) {
    pass.split = &split_of(pass, exchange->rank(), exchange->ranks());
    pass.exchange = exchange;
    pass.plan[0] = &pass.split->layout[0].local, pass.plan[1] = &pass.split->layout[1].local;
  }
  const DitSplit* split = pass.split;
  const int64_t N = pass.t * pass.h * pass.w;
  auto show = [&](const std::string& name, const at::Tensor& x) {
    if (probe) probe(name, x);
  };
  // The video tokens in token order, for a probe: a split forward's ranks hold their windows'
  // tokens only, so its probes get the text and the time embedding, not the video.
  auto show_video = [&](const std::string& name, const at::Tensor& x) {
    if (probe && !split) probe(name, x.view({T, pass.h, pass.w, a.dim}));
  };

  // Time embedding and the modulation table [dim, 6] (channel-major: emb viewed [dim, 2, 3]).
  const at::Tensor sinusoid = timestep_sinusoid(timestep);
  show("t_sinusoid", sinusoid);
  at::Tensor e = sinusoid.to(o.device, dtype);
  e = at::silu(at::linear(e, m.emb_w[0], m.emb_b[0].to(dtype)));
  e = at::silu(at::linear(e, m.emb_w[1], m.emb_b[1].to(dtype)));
  e = at::linear(e, m.emb_w[2], m.emb_b[2].to(dtype)).to(at::kFloat);
  show("time_emb", e);
  const at::Tensor table = e.view({a.dim, 6});

  // Patchify: token (t, y, x) = the (dy, dx, c) features of latent (t, 2y + dy, 2x + dx).
  at::Tensor patches = vid_in.to(o.device, at::kFloat)
                           .view({T, pass.h, 2, pass.w, 2, a.in_channels})
                           .permute({0, 1, 3, 2, 4, 5})
                           .reshape({N, a.patch_features()});
  if (split) {
    // This rank's tokens of the first block's (regular) windows, in their window order.
    const int64_t k0 = split->layout[0].token_begin[size_t(split->rank)];
    patches = patches.index_select(0, shape->plans[0].order.narrow(0, k0, split->tokens(0)));
  }
  at::Tensor v = at::linear(patches.to(dtype), m.vid_in_w, m.vid_in_b.to(dtype)).to(at::kFloat);
  at::Tensor s =
      at::linear(txt_in.to(o.device, dtype), m.txt_in_w, m.txt_in_b.to(dtype)).to(at::kFloat);
  show("txt_tokens", s);
  show_video("vid_tokens", v);

  std::unique_lock<std::mutex> ring_lock(m.ring_mutex, std::defer_lock);
  const bool streaming = m.resident < a.layers;
  if (streaming) ring_lock.lock();
#ifdef WMBATCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> copy;
  const int slots = std::max(1, o.prefetch) + 1;
  if (streaming) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(o.device.index());
    copy = c10::cuda::CUDAStream(exec::context_for(context, o.device).side_stream(0));
    if (int(m.ring.size()) != slots) {
      m.ring.assign(size_t(slots), Block{});
      m.ring_ready.clear();
      m.ring_ready.resize(size_t(slots));
      m.ring_free.clear();
      m.ring_free.resize(size_t(slots));
    }
    (void)compute;
  }
  int issued = m.resident;  // streamed blocks whose copies are under way: [resident, issued)
  // Starts the copy of streamed block j into its ring slot on the copy stream, after the compute
  // stream has finished with the slot's last block.
  auto issue = [&](int j) {
    const size_t slot = size_t(j % slots);
    const Block& src = m.blocks[size_t(j)];
    Block& dst = m.ring[slot];
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(o.device.index());
    auto buffer = [&](at::Tensor& d, const at::Tensor& h) {
      if (!h.defined()) {
        d = at::Tensor();
        return;
      }
      if (!d.defined() || d.sizes() != h.sizes() || d.scalar_type() != h.scalar_type()) {
        d = at::empty(h.sizes(), h.options().device(o.device).pinned_memory(false));
      }
    };
    auto branch_buffers = [&](Block::Branch& d, const Block::Branch& h) {
      buffer(d.qkv, h.qkv), buffer(d.out_w, h.out_w), buffer(d.out_b, h.out_b);
      buffer(d.norm_q, h.norm_q), buffer(d.norm_k, h.norm_k), buffer(d.mlp_in, h.mlp_in);
      buffer(d.mlp_in_b, h.mlp_in_b), buffer(d.mlp_out, h.mlp_out);
      buffer(d.mlp_out_b, h.mlp_out_b), buffer(d.ada, h.ada);
    };
    const bool shared = src.txt.qkv.is_same(src.vid.qkv);
    // A slot that last held a shared block has its txt aliasing its vid buffers: a block with
    // text weights of its own needs buffers of its own, or its text copy overwrites its video
    // weights (seen on the H200: a second forward with 2 or 3 slots differed).
    if (!shared && dst.txt.qkv.defined() && dst.txt.qkv.is_same(dst.vid.qkv)) {
      dst.txt = Block::Branch{};
    }
    branch_buffers(dst.vid, src.vid);
    if (!shared) branch_buffers(dst.txt, src.txt);
    // Buffers (re)allocated on the compute stream, and the slot's last user, come first.
    at::cuda::CUDAEvent allocated;
    allocated.record(compute);
    allocated.block(*copy);
    if (m.ring_free[slot]) m.ring_free[slot]->block(*copy);
    {
      const c10::cuda::CUDAStreamGuard guard(*copy);
      auto up = [](Block::Branch& d, const Block::Branch& h) {
        for (auto [dt, ht] : {std::pair{&d.qkv, &h.qkv},
                              {&d.out_w, &h.out_w},
                              {&d.out_b, &h.out_b},
                              {&d.norm_q, &h.norm_q},
                              {&d.norm_k, &h.norm_k},
                              {&d.mlp_in, &h.mlp_in},
                              {&d.mlp_in_b, &h.mlp_in_b},
                              {&d.mlp_out, &h.mlp_out},
                              {&d.mlp_out_b, &h.mlp_out_b},
                              {&d.ada, &h.ada}}) {
          if (ht->defined()) dt->copy_(*ht, /*non_blocking=*/true);
        }
      };
      up(dst.vid, src.vid);
      if (!shared) up(dst.txt, src.txt);
    }
    if (shared) dst.txt = dst.vid;
    m.ring_ready[slot].emplace();
    m.ring_ready[slot]->record(*copy);
  };
#else
  (void)context;
  if (streaming) throw ModelError("seedvr2 dit: streamed blocks need a CUDA build");
#endif

  for (int i = 0; i < a.layers; ++i) {
    Block block;
    if (i < m.resident) {
      block = usable(m.blocks[size_t(i)], dtype);
    } else {
#ifdef WMBATCH_WITH_CUDA
      while (issued < a.layers && issued <= i + std::max(1, o.prefetch)) issue(issued++);
      const size_t slot = size_t(i % slots);
      m.ring_ready[slot]->block(c10::cuda::getCurrentCUDAStream(o.device.index()));
      block = usable(m.ring[slot], dtype);
#endif
    }
    // A split forward's tokens go over to the windows of this block's layout.
    if (split && i > 0) v = move_tokens(*split, (i - 1) % 2, v, *exchange);
    run_block(pass, block, i, table, v, s);
#ifdef WMBATCH_WITH_CUDA
    if (i >= m.resident) {
      const size_t slot = size_t(i % slots);
      m.ring_free[slot].emplace();
      m.ring_free[slot]->record(c10::cuda::getCurrentCUDAStream(o.device.index()));
    }
#endif
    if (probe) {
      show_video("block" + std::to_string(i) + "_vid", v);
      // Upstream's last 3B block hands back twice its post-attention text (never used).
      show("block" + std::to_string(i) + "_txt", a.text_tail(i) ? s * 2 : s);
    }
  }

  if (a.out_norm()) {
    // The output modulation takes the table's attn part (spec §4.6, pitfall 1).
    v = rms(v) * m.out_norm;
    v = at::addcmul(table.select(1, 0) + m.out_shift, v, table.select(1, 1) + m.out_scale);
    show_video("vid_out_in", v);
  }
  at::Tensor y = at::linear(v.to(dtype), m.out_w, m.out_b.to(dtype)).to(at::kFloat);
  if (split) {
    // Every rank's tokens, in the window order of the last block's layout, then in token order.
    const int last = (a.layers - 1) % 2;
    const std::vector<int64_t>& begin = split->layout[last].token_begin;
    std::vector<int64_t> counts;
    for (size_t q = 0; q + 1 < begin.size(); ++q) counts.push_back(begin[q + 1] - begin[q]);
    y = gather_rows(y, counts, *exchange).index_select(0, shape->plans[last].inverse);
  }
  return y.view({T, pass.h, pass.w, 2, 2, a.out_channels})
      .permute({0, 1, 3, 2, 4, 5})
      .reshape({T, H, W, a.out_channels});
}

}  // namespace wm::models::seedvr2
