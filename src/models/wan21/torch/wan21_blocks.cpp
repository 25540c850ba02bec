#include "src/models/wan21/torch/wan21_blocks.h"

#include <ATen/Config.h>
#include <torch/version.h>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "src/base/error.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/exec/search_gate_torch.h"
#include "src/models/kernels/torch/cuda_kernels.h"
#include "src/models/wan21/wan21_vae.h"

namespace wm::models::wan21 {

namespace {

constexpr double kNormEps = 1e-12;    // F.normalize's eps
constexpr int64_t kCausalFrames = 2;  // kt - 1 for every causal kernel of this model

struct Conv {
  at::Tensor weight;  // [out, in, kt, kh, kw]
  at::Tensor bias;    // [out]
};

// --- per-stage timings -----------------------------------------------------------------------

struct Profile {
  std::mutex mutex;
  bool on = false;
  std::vector<StageTime> stages;
  int current = -1;
};
Profile& profile() {
  static Profile p;
  return p;
}

void device_sync(bool cuda) {
#ifdef WMBATCH_WITH_CUDA
  if (cuda) c10::cuda::device_synchronize();
#else
  (void)cuda;
#endif
}

// Peak MiB allocated on a CUDA device since the last reset (0 elsewhere); resets it.
double take_peak_mib(const at::Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.is_cuda()) {
    const c10::DeviceIndex index = device.index();
    const double peak =
        double(c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].peak) /
        double(1 << 20);
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    return peak;
  }
#endif
  (void)device;
  return 0;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Times one block; conv timings inside it are added to the same entry.
class StageTimer {
 public:
  StageTimer(const std::string& name, const at::Tensor& x) {
    Profile& p = profile();
    if (!p.on) return;
    cuda_ = x.is_cuda();
    device_sync(cuda_);
    auto it = std::find_if(p.stages.begin(), p.stages.end(),
                           [&](const StageTime& s) { return s.name == name; });
    if (it == p.stages.end()) {
      p.stages.push_back(StageTime{name});
      it = p.stages.end() - 1;
    }
    index_ = int(it - p.stages.begin());
    p.current = index_;
    device_ = x.device();
    take_peak_mib(device_);
    start_ = now_ms();
  }
  ~StageTimer() {
    if (index_ < 0) return;
    Profile& p = profile();
    device_sync(cuda_);
    p.stages[size_t(index_)].ms += now_ms() - start_;
    if (cuda_) {
      const double peak = take_peak_mib(device_);
      p.stages[size_t(index_)].peak_mib = std::max(p.stages[size_t(index_)].peak_mib, peak);
    }
    p.stages[size_t(index_)].calls += 1;
    p.current = -1;
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  int index_ = -1;
  bool cuda_ = false;
  at::Device device_ = at::kCPU;
  double start_ = 0;
};

// Times one conv call inside the current stage; done(y) adds its FLOPs.
class ConvTimer {
 public:
  explicit ConvTimer(const at::Tensor& x) {
    Profile& p = profile();
    if (!p.on || p.current < 0) return;
    cuda_ = x.is_cuda();
    device_sync(cuda_);
    index_ = p.current;
    start_ = now_ms();
  }
  void done(const at::Tensor& weight, const at::Tensor& y) {
    if (index_ < 0) return;
    Profile& p = profile();
    device_sync(cuda_);
    StageTime& s = p.stages[size_t(index_)];
    s.conv_ms += now_ms() - start_;
    s.flops += 2.0 * double(weight.numel()) * double(y.numel() / y.size(1));
    index_ = -1;
  }

 private:
  int index_ = -1;
  bool cuda_ = false;
  double start_ = 0;
};

// --- convolutions ----------------------------------------------------------------------------

at::Tensor conv(const at::Tensor& x, const Conv& c, at::IntArrayRef stride = {1, 1, 1},
                at::IntArrayRef padding = {0, 0, 0}) {
  ConvTimer timer(x);
  at::Tensor y;
#if AT_MKLDNN_ENABLED()
  // LibTorch 1.13 sends CPU convs with few channels·frames·rows to a reference (vol2col + BLAS)
  // path that is 10–40× slower than oneDNN; call oneDNN directly for float32 on the CPU.
  if (x.is_cpu() && x.scalar_type() == at::kFloat) {
    y = at::mkldnn_convolution(x, c.weight, c.bias, padding, stride, {1, 1, 1}, 1);
  }
#endif
  if (!y.defined()) {
    const exec::SearchPass pass = exec::conv_search_pass(x, c.weight, padding, stride);
    y = at::conv3d(x, c.weight, c.bias, stride, padding);
  }
  timer.done(c.weight, y);
  return y;
}

// Frames [t0, t0 + n) of a [1, C, T, H, W] channels_last_3d tensor as a view whose strides are
// those of a packed tensor of its own size (the batch stride is irrelevant at batch 1, but
// cuDNN's packed-layout engines look at it).
at::Tensor packed_frames(const at::Tensor& t, int64_t t0, int64_t n) {
  at::Tensor v = t.narrow(2, t0, n);
  const int64_t c = v.size(1), h = v.size(3), w = v.size(4);
  return v.as_strided(v.sizes(), {n * h * w * c, 1, h * w * c, w * c, c}, v.storage_offset());
}

bool packed_channels_last(const at::Tensor& t) {
  if (t.dim() != 5 || t.size(0) != 1) return false;
  const int64_t c = t.size(1), h = t.size(3), w = t.size(4);
  return t.stride(1) == 1 && t.stride(4) == c && t.stride(3) == w * c && t.stride(2) == h * w * c;
}

// CUDA: cuDNN conv (stride 1, temporal padding 0) written straight into its output, no bias;
// at most `frames_per_call` output frames per cuDNN call (0: auto, < 0: all), all into one
// tensor.
bool raw_ok(const at::Tensor& x, const Tuning& tuning) {
  return x.is_cuda() && tuning.raw_conv && packed_channels_last(x);
}
// `pad_h` < 0: `pad` rows too (a spatial-parallel band's conv pads columns only: its rows come
// from the bands above and below).
at::Tensor conv_raw(const at::Tensor& x, const at::Tensor& weight, int64_t pad,
                    int64_t frames_per_call, int64_t pad_h = -1) {
  ConvTimer timer(x);
  if (pad_h < 0) pad_h = pad;
  const int64_t kt = weight.size(2), kh = weight.size(3), kw = weight.size(4);
  const int64_t t_out = x.size(2) - kt + 1;
  const int64_t h_out = x.size(3) + 2 * pad_h - kh + 1, w_out = x.size(4) + 2 * pad - kw + 1;
  at::Tensor y = at::empty({1, weight.size(0), t_out, h_out, w_out},
                           x.options().memory_format(at::MemoryFormat::ChannelsLast3d));
  const bool benchmark = at::globalContext().benchmarkCuDNN();
  const bool tf32 = x.scalar_type() == at::kFloat ? at::globalContext().allowTF32CuDNN() : true;
  // Auto: at most 16 output frames and < 2^31 input elements per call. Larger calls gained
  // nothing on an H200, and cuDNN's autotuning of >2^31-element shapes took minutes.
  int64_t step = frames_per_call;
  if (step == 0) {
    const int64_t per_frame = x.size(1) * x.size(3) * x.size(4);
    step = std::clamp<int64_t>(((int64_t(1) << 31) - 1) / per_frame - (kt - 1), 1, 16);
  }
  if (step < 0) step = t_out;
  for (int64_t t0 = 0; t0 < t_out; t0 += step) {
    const int64_t n = std::min(step, t_out - t0);
    at::Tensor out = packed_frames(y, t0, n);
    const at::Tensor in = packed_frames(x, t0, n + kt - 1);
    const exec::SearchPass pass = exec::conv_search_pass(in, weight, {0, pad_h, pad});
    at::cudnn_convolution_out(out, in, weight, {0, pad_h, pad}, {1, 1, 1}, {1, 1, 1}, 1, benchmark,
                              /*deterministic=*/false, tf32);
  }
  timer.done(weight, y);
  return y;
}

at::Tensor channel_view(const at::Tensor& v) { return v.reshape({1, -1, 1, 1, 1}); }

// Fetches parameters in checkpoint order and hands out state slots.
class Builder {
 public:
  Builder(ParamSource& source, at::MemoryFormat memory_format, const Tuning& tuning)
      : source_(source), memory_format_(memory_format), tuning_(tuning) {}

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
  const Tuning& tuning() const { return tuning_; }

 private:
  ParamSource& source_;
  at::MemoryFormat memory_format_;
  const Tuning& tuning_;
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

// rms_norm_into(x + bias) — one fused CUDA pass when possible. Adds `bias` to x in place on the
// fallback path (x is then the caller's dead intermediate).
void norm_into(at::Tensor& x, const at::Tensor& bias, const at::Tensor& gamma,
               const at::Tensor& out, bool silu, const Tuning& tuning) {
  if (tuning.fused &&
      cuda::rms_norm(x, bias, {}, gamma, out, {}, silu, kNormEps, tuning.norm_threads)) {
    return;
  }
  if (bias.defined()) x.add_(channel_view(bias));
  rms_norm_into(x, gamma, out, silu);
}

// y += bias + residual (bias may be undefined), in one CUDA pass when possible.
void add_bias_residual(at::Tensor& y, const at::Tensor& bias, const at::Tensor& residual,
                       const Tuning& tuning) {
  if (tuning.fused &&
      cuda::rms_norm(y, bias, residual, {}, {}, y, false, kNormEps, tuning.norm_threads)) {
    return;
  }
  y.add_(residual);
  if (bias.defined()) y.add_(channel_view(bias));
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

// Spatial parallelism (SequenceState::row_halo). The exchanges below order their sends and
// receives so that every transfer's two ends meet in the same step on both ranks: no cycle of
// ranks waiting on each other even where a send waits on the device for its receive (NCCL: the
// transfers of a stream run one after the other). The in-process exchange's sends never wait.

// `buf` is [1, C, T, p + h + p, W] with this rank's band in rows [p, p + h). Sends the band's
// first p rows to the rank above and its last p rows to the rank below, and fills rows [0, p)
// and [p + h, h + 2p) with theirs (zeros at the frame's top and bottom: the conv's zero
// padding there). Every frame of `buf` goes, the history frames of a causal conv included.
// Down, then up, each in two steps: pairs (even rank, odd rank below it), then (odd, even).
void exchange_rows(exec::HaloExchange& halo, const at::Tensor& buf, int64_t p) {
  const int r = halo.rank(), n = halo.ranks();
  const int64_t h = buf.size(3) - 2 * p;
  if (h < p) {
    throw ModelError("wan2.1-vae: a spatial-parallel band of " + std::to_string(h) +
                     " rows is narrower than a convolution's halo of " + std::to_string(p));
  }
  auto take = [&](int from, int64_t row) {
    const at::Tensor dst = buf.narrow(3, row, p);
    at::Tensor in =
        at::empty(dst.sizes(), buf.options().memory_format(at::MemoryFormat::Contiguous));
    halo.recv(from, in);
    dst.copy_(in);
  };
  const bool even = r % 2 == 0;
  for (int step = 0; step < 2; ++step) {  // down: rows [h, h + p) to r + 1
    if (even == (step == 0)) {
      if (r + 1 < n) halo.send(r + 1, buf.narrow(3, h, p));
    } else if (r > 0) {
      take(r - 1, 0);
    }
  }
  for (int step = 0; step < 2; ++step) {  // up: rows [p, 2p) to r − 1
    if (even != (step == 0)) {
      if (r > 0) halo.send(r - 1, buf.narrow(3, p, p));
    } else if (r + 1 < n) {
      take(r + 1, p + h);
    }
  }
  if (r == 0) buf.narrow(3, 0, p).zero_();
  if (r + 1 == n) buf.narrow(3, p + h, p).zero_();
}

// Every pair of ranks (a < b) in one order on every rank: a sends to b, then b to a.
template <typename Send, typename Recv>
void each_pair(exec::HaloExchange& halo, Send&& send, Recv&& recv) {
  const int r = halo.rank(), n = halo.ranks();
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (r == a) {
        send(b);
        recv(b);
      } else if (r == b) {
        recv(a);
        send(a);
      }
    }
  }
}

// Every rank's tokens ([T, n_r, C] each, its band's pixels in row-major order), concatenated in
// rank order: the whole frame's tokens, as one device has them.
at::Tensor all_tokens(exec::HaloExchange& halo, const at::Tensor& mine) {
  const int r = halo.rank(), n = halo.ranks();
  // The bands' token counts first (bands may differ by a row), host to host.
  std::vector<int64_t> sizes(static_cast<size_t>(n), 0);
  each_pair(
      halo, [&](int to) { halo.send_values(to, {mine.size(1)}); },
      [&](int from) {
        const std::vector<int64_t> got = halo.recv_values(from);
        if (got.size() != 1) throw ModelError("wan2.1-vae: a malformed token count from a rank");
        sizes[size_t(from)] = got[0];
      });
  sizes[size_t(r)] = mine.size(1);
  std::vector<at::Tensor> parts(static_cast<size_t>(n));
  parts[size_t(r)] = mine.contiguous();
  each_pair(
      halo, [&](int to) { halo.send(to, parts[size_t(r)]); },
      [&](int from) {
        parts[size_t(from)] = at::empty({mine.size(0), sizes[size_t(from)], mine.size(2)},
                                        mine.options().memory_format(at::MemoryFormat::Contiguous));
        halo.recv(from, parts[size_t(from)]);
      });
  return at::cat(parts, 1);
}

// Causal conv with kernel (3, kh, kw): two frames of history in front, spatial zero padding.
// The padded input is built once per call ([history | body]); the body is written by the caller
// (a copy, or a norm straight into it), so no concatenation copies.
class CausalConv {
 public:
  CausalConv() = default;
  CausalConv(Builder& b, const std::string& prefix, int64_t out, int64_t in, int64_t kh)
      : conv_(b.conv3d(prefix, out, in, kCausalFrames + 1, kh, kh)),
        in_channels_(in),
        pad_(kh / 2),
        slot_(b.slot()),
        memory_format_(b.memory_format()),
        tuning_(&b.tuning()) {}

  at::Tensor forward(const at::Tensor& x, SequenceState& st) const {
    return run(
        x, st, [&](const at::Tensor& body) { body.copy_(x); }, nullptr);
  }
  // Convolves [history | body], where fill(body) writes x.size(2) frames. When `bias_pending`
  // is given and the CUDA raw path applies, the bias is NOT added (*bias_pending = true): the
  // caller folds it into its next pass.
  template <typename Fill>
  at::Tensor run(const at::Tensor& x, SequenceState& st, Fill&& fill, bool* bias_pending) const {
    if (st.row_halo && pad_ > 0) return run_rows(x, st, fill, bias_pending);
    receive_history(x, st);
    at::Tensor buf = history_buffer(x, st.slots[slot_], kCausalFrames, memory_format_);
    fill(buf.narrow(2, kCausalFrames, x.size(2)));
    at::Tensor& slot = st.slots[slot_];
    if (st.write_in_place && slot.defined()) {
      slot.copy_(buf.narrow(2, buf.size(2) - kCausalFrames, kCausalFrames));
    } else {
      slot = last_frames(buf, kCausalFrames, memory_format_);
    }
    send_history(st);
    if (bias_pending) *bias_pending = false;
    if (bias_pending && raw_ok(buf, *tuning_)) {
      *bias_pending = true;
      return narrow_outputs(conv_raw(buf, conv_.weight, pad_, tuning_->conv_frames));
    }
    return narrow_outputs(conv(buf, conv_, {1, 1, 1}, {0, pad_, pad_}));
  }
  // A sequence-parallel rank with no frames for this layer (rank 0 holding only sequence frame
  // 0, which an upsample's time conv skips): its history passes on unchanged (zeros when none).
  void relay(const at::Tensor& x, SequenceState& st) const {
    receive_history(x, st);
    at::Tensor& slot = st.slots[slot_];
    if (!slot.defined())
      slot = at::zeros(history_sizes(x), x.options().memory_format(memory_format_));
    send_history(st);
  }
  at::Tensor bias() const {
    return out_channels_ > 0 ? conv_.bias.narrow(0, 0, out_channels_) : conv_.bias;
  }
  int slot() const { return slot_; }
  int64_t in_channels() const { return in_channels_; }
  int64_t radius() const { return pad_; }
  // CUDA: pads the filters with zero ones up to a multiple of `m` output channels (cuDNN runs
  // 96→3 as a slow non-tensor-core kernel, 22 TFLOP/s on an H200); run() then returns a channel
  // view of the real outputs.
  void pad_outputs(int64_t m) {
    if (!conv_.weight.defined() || !conv_.weight.is_cuda()) return;
    const int64_t out = conv_.weight.size(0), padded = (out + m - 1) / m * m;
    if (padded == out) return;
    std::vector<int64_t> shape = conv_.weight.sizes().vec();
    shape[0] = padded - out;
    conv_.weight = at::cat({conv_.weight, at::zeros(shape, conv_.weight.options())}, 0)
                       .contiguous(memory_format_);
    conv_.bias = at::cat({conv_.bias, at::zeros({padded - out}, conv_.bias.options())});
    out_channels_ = out;
  }

 private:
  // Spatial parallelism: [history | body] of this rank's band with the neighbouring bands'
  // boundary rows above and below (exchange_rows), convolved without row padding. The slot
  // keeps the band's own history.
  template <typename Fill>
  at::Tensor run_rows(const at::Tensor& x, SequenceState& st, Fill&& fill,
                      bool* bias_pending) const {
    const int64_t t = x.size(2), h = x.size(3), p = pad_;
    at::Tensor buf = at::empty({x.size(0), x.size(1), kCausalFrames + t, h + 2 * p, x.size(4)},
                               x.options().memory_format(memory_format_));
    const at::Tensor band = buf.narrow(3, p, h);
    at::Tensor& slot = st.slots[slot_];
    at::Tensor head = band.narrow(2, 0, kCausalFrames);
    if (slot.defined()) {
      head.copy_(slot);
    } else {
      head.zero_();
    }
    fill(band.narrow(2, kCausalFrames, t));
    const at::Tensor tail = band.narrow(2, t, kCausalFrames);
    if (st.write_in_place && slot.defined()) {
      slot.copy_(tail);
    } else {
      slot = tail.clone(memory_format_);
    }
    exchange_rows(*st.row_halo, buf, p);
    // As one device: cuDNN written in place, ≤ 16 frames per call (a whole slice per call made
    // cuDNN's autotuning of > 2^31-element shapes take minutes), the bias left to the next pass.
    if (bias_pending) *bias_pending = false;
    if (bias_pending && raw_ok(buf, *tuning_)) {
      *bias_pending = true;
      return narrow_outputs(conv_raw(buf, conv_.weight, p, tuning_->conv_frames, /*pad_h=*/0));
    }
    return narrow_outputs(conv(buf, conv_, {1, 1, 1}, {0, 0, p}));
  }
  static std::vector<int64_t> history_sizes(const at::Tensor& x) {
    return {1, x.size(1), kCausalFrames, x.size(3), x.size(4)};
  }
  // Sequence parallelism (SequenceState::halo, a ring): this layer's history, the last input
  // frames of the part before this rank's, comes from history_from() before the layer's first
  // call of this part (none: the rank keeps its own, the state its slice started with); the new
  // history goes to history_to() after its last call, and is dropped here (this rank's next
  // slice takes its history from the rank before it).
  void receive_history(const at::Tensor& x, SequenceState& st) const {
    if (!st.halo) return;
    const int from = st.halo->history_from();
    if (from < 0) return;
    if (size_t(slot_) < st.received.size()) {
      if (st.received[size_t(slot_)]) return;  // a later chunk: the history is this rank's own
      st.received[size_t(slot_)] = 1;
    }
    at::Tensor history = at::empty(history_sizes(x), x.options().memory_format(memory_format_));
    st.halo->recv(from, history);
    at::Tensor& slot = st.slots[slot_];
    if (st.write_in_place && slot.defined()) {
      slot.copy_(history);
    } else {
      slot = history;
    }
  }
  void send_history(SequenceState& st) const {
    if (!st.halo || !st.sends) return;
    const int to = st.halo->history_to();
    if (to < 0) return;
    if (st.write_in_place) {
      st.halo->send(to, st.slots[slot_]);  // the buffer is written again next slice
    } else {
      // Slots are replaced, never written, in this mode (a clone of the input's last frames, or
      // a history received): it is dropped here, so it goes without a copy.
      st.halo->give(to, std::exchange(st.slots[slot_], at::Tensor()));
    }
  }
  at::Tensor narrow_outputs(const at::Tensor& y) const {
    return out_channels_ > 0 ? y.narrow(1, 0, out_channels_) : y;
  }

  Conv conv_;
  int64_t out_channels_ = 0;  // > 0: conv_ is padded; the real output channels
  int64_t in_channels_ = 0;
  int64_t pad_ = 0;
  int slot_ = -1;
  at::MemoryFormat memory_format_ = at::MemoryFormat::Contiguous;
  const Tuning* tuning_ = nullptr;
};

}  // namespace

// Slot and input channels of a causal layer (its state: two frames of that many channels at the
// block's input resolution).
struct SlotInfo {
  int slot;
  int64_t channels;
};

class Block {
 public:
  virtual ~Block() = default;
  virtual at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const = 0;
  // Spatial geometry, for exact tiling: the input halo needed for an output halo of `out`
  // pixels, the output pixels per input pixel, the causal layers. Defaults: per-pixel, no state.
  virtual int64_t input_halo(int64_t out) const { return out; }
  virtual int64_t scale() const { return 1; }
  virtual std::vector<SlotInfo> slots() const { return {}; }
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
        conv2_(b, p + ".residual.6", out, out, 3),
        tuning_(&b.tuning()) {
    if (in != out) {
      shortcut_ = b.conv3d(p + ".shortcut", out, in, 1, 1, 1);
      if (shortcut_.bias.defined()) {
        bias_sum_ = (conv2_.bias().to(at::kFloat) + shortcut_.bias.to(at::kFloat))
                        .to(shortcut_.bias.scalar_type());
      }
    }
  }
  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    const Tuning& tu = *tuning_;
    bool pending1 = false, pending2 = false;
    at::Tensor h = conv1_.run(
        x, st, [&](const at::Tensor& body) { norm_into(x, {}, gamma1_, body, true, tu); },
        &pending1);
    at::Tensor y = conv2_.run(
        h, st,
        [&](const at::Tensor& body) {
          norm_into(h, pending1 ? conv1_.bias() : at::Tensor(), gamma2_, body, true, tu);
          h.reset();  // free before conv2 runs
        },
        &pending2);
    at::Tensor residual = x, bias = pending2 ? conv2_.bias() : at::Tensor();
    if (shortcut_.weight.defined()) {
      if (pending2 && raw_ok(x, tu)) {
        residual = conv_raw(x, shortcut_.weight, 0, tu.conv_frames);
        bias = bias_sum_;
      } else {
        residual = conv(x, shortcut_);
      }
    }
    x.reset();
    add_bias_residual(y, bias, residual, tu);
    return y;
  }
  int64_t input_halo(int64_t out) const override { return out + conv1_.radius() + conv2_.radius(); }
  std::vector<SlotInfo> slots() const override {
    return {{conv1_.slot(), conv1_.in_channels()}, {conv2_.slot(), conv2_.in_channels()}};
  }

 private:
  at::Tensor gamma1_;
  CausalConv conv1_;
  at::Tensor gamma2_;
  CausalConv conv2_;
  Conv shortcut_;
  at::Tensor bias_sum_;  // conv2 bias + shortcut bias
  const Tuning* tuning_;
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
        proj_bias_(b.param(p + ".proj.bias", {c})),
        tuning_(&b.tuning()) {
    if (qkv_weight_.defined()) qkv_weight_ = qkv_weight_.reshape({3 * c, c}).contiguous();
    if (proj_weight_.defined()) proj_weight_ = proj_weight_.reshape({c, c}).contiguous();
  }

  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    const int64_t c = channels_, t = x.size(2), h = x.size(3), w = x.size(4);
    at::Tensor n = at::empty_like(x);
    norm_into(x, {}, gamma_, n, /*silu=*/false, *tuning_);
    // Tokens [T, H·W, C] (a view when x is channels_last_3d).
    at::Tensor tokens = n.squeeze(0).permute({1, 2, 3, 0}).reshape({t, h * w, c});
    n.reset();
    at::Tensor qkv, q, k, v;
    if (st.row_halo && st.row_halo->ranks() > 1) {
      // A band of rows: its own queries, keys and values of the whole frame (every rank's
      // normalised tokens, gathered: half the bytes of the keys and values, and projecting
      // them again is cheap next to the attention).
      const at::Tensor all = all_tokens(*st.row_halo, tokens);
      q = at::linear(tokens, qkv_weight_.narrow(0, 0, c), qkv_bias_.narrow(0, 0, c));
      qkv = at::linear(all, qkv_weight_.narrow(0, c, 2 * c), qkv_bias_.narrow(0, c, 2 * c));
      k = qkv.narrow(2, 0, c);
      v = qkv.narrow(2, c, c);
    } else {
      qkv = at::linear(tokens, qkv_weight_, qkv_bias_);
      q = qkv.narrow(2, 0, c);
      k = qkv.narrow(2, c, c);
      v = qkv.narrow(2, 2 * c, c);
    }
    tokens.reset();
    at::Tensor o;
    const int mode = tuning_->gemm_attention;
    if (!(mode == 1 || (mode < 0 && c > kFusedAttentionMaxHead)) || !attend_gemm(q, k, v, o)) {
      o = attend(q, k, v);
    }
    qkv.reset();
    q.reset();
    k.reset();
    v.reset();
    o = at::linear(o, proj_weight_, proj_bias_);
    at::Tensor out = at::empty_like(x);
    at::add_out(out, x, o.view({1, t, h, w, c}).permute({0, 4, 1, 2, 3}));
    return out;
  }

 private:
  // Widest head of PyTorch's fused (flash / cuDNN) attention kernels; beyond it SDPA falls back
  // to its memory-efficient kernel, measured at 89 TFLOP/s for Wan2.1's 384 on an H200.
  static constexpr int64_t kFusedAttentionMaxHead = 256;

  // CUDA, half precision: per frame and block of queries, the scores in float32 by one cuBLAS
  // GEMM, softmax in float32, the probabilities rounded to the input dtype (as flash attention
  // rounds them) for the second GEMM, with float32 accumulation. Blocks keep the float32 scores
  // ≤ 128 MiB (512 MiB blocks fragmented the allocator enough to force a retry at a 12 GiB cap,
  // and were no faster). False (out untouched) when the inputs do not suit it.
  static bool attend_gemm(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          at::Tensor& out) {
    // (A spatial-parallel rank has fewer queries than keys: its band's.)
    const int64_t t = q.size(0), tokens = q.size(1), keys = k.size(1), c = q.size(2);
    if (!q.is_cuda() || (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf))
      return false;
    const int64_t rows =
        std::clamp<int64_t>((int64_t(1) << 27) / (keys * int64_t(sizeof(float))), 1, tokens);
    at::Tensor scores = at::empty({rows, keys}, q.options().dtype(at::kFloat));
    at::Tensor result = at::empty({t, tokens, c}, q.options());
    const double scale = 1.0 / std::sqrt(double(c));
    for (int64_t f = 0; f < t; ++f) {
      const at::Tensor qf = q.select(0, f), kf = k.select(0, f), vf = v.select(0, f);
      for (int64_t r0 = 0; r0 < tokens; r0 += rows) {
        const int64_t n = std::min(rows, tokens - r0);
        at::Tensor s = scores.narrow(0, 0, n);
        if (!cuda::attention_scores(qf.narrow(0, r0, n), kf, scale, s)) return false;
        const at::Tensor p = at::softmax(s, -1).to(q.scalar_type());
        at::Tensor dst = result.select(0, f).narrow(0, r0, n);
        at::mm_out(dst, p, vf);
      }
    }
    out = std::move(result);
    return true;
  }

  // softmax(q kᵀ / √C) v per frame; q, k, v: [T, N, C]. Frames go in groups whose [n, N, N]
  // score matrices would fit in ~1 GiB: bounded memory on the matmul path (and on SDPA's math
  // fallback, e.g. for head widths the fused kernels lack), while a group still fills the device.
  static at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    // (A spatial-parallel rank has fewer queries than keys: its band's.)
    const int64_t t = q.size(0), tokens = q.size(1), keys = k.size(1), c = q.size(2);
    const int64_t score_bytes = std::max<int64_t>(1, tokens * keys * int64_t(q.element_size()));
    const int64_t group = std::max<int64_t>(1, (int64_t(1) << 30) / score_bytes);
    if (score_bytes > (int64_t(1) << 30)) {
      // One frame's scores alone exceed the budget (e.g. 1080p: 32400² tokens): query blocks
      // of ~256 MiB of scores each (softmax is per query row, so this is exact).
      const int64_t rows =
          std::max<int64_t>(1, (int64_t(1) << 28) / (keys * int64_t(q.element_size())));
      at::Tensor out = at::empty({t, tokens, c}, q.options());
      for (int64_t f = 0; f < t; ++f) {
        for (int64_t r0 = 0; r0 < tokens; r0 += rows) {
          const int64_t n = std::min(rows, tokens - r0);
          out.narrow(0, f, 1).narrow(1, r0, n).copy_(
              attend(q.narrow(0, f, 1).narrow(1, r0, n), k.narrow(0, f, 1), v.narrow(0, f, 1)));
        }
      }
      return out;
    }
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
  const Tuning* tuning_;
};

// Nearest 2× followed by a 3×3 conv (padding 1) equals, per output phase (a, b) ∈ {0,1}², a 2×2
// conv on the source: rows/columns of the 3×3 kernel fold onto two source taps. All four phases
// come from one 2×2 conv with padding 1 over the source ([4·C', H+1, W+1]; phase (a, b) at
// (i + a, j + b)), i.e. 16 instead of 36 multiply-adds per source pixel and channel pair, and
// no 4× upsampled input in memory.
at::Tensor subpixel_weight(const at::Tensor& weight3) {  // [C', C, 1, 3, 3] → [4C', C, 1, 2, 2]
  at::Tensor w = weight3.squeeze(2).to(at::kCPU, at::kDouble);
  const at::Tensor fold =
      at::tensor(std::vector<double>{1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1}, at::kDouble)
          .view({2, 2, 3});  // fold[a]: 2 taps × 3 kernel rows
  std::vector<at::Tensor> phases;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      phases.push_back(at::matmul(at::matmul(fold[a], w), fold[b].t()));
    }
  }
  return at::cat(phases, 0).unsqueeze(2).to(weight3.device(), weight3.scalar_type());
}

// out[:, c, t, 2i+a, 2j+b] = y[:, (2a+b)·C' + c, t, i+a, j+b] + bias[c] (ATen fallback).
void depth_to_space_aten(const at::Tensor& y, const at::Tensor& bias, const at::Tensor& out) {
  const int64_t c = out.size(1), t = out.size(2), h = out.size(3) / 2, w = out.size(4) / 2;
  at::Tensor o = out.view({out.size(0), c, t, h, 2, w, 2});
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t b = 0; b < 2; ++b) {
      o.select(6, b).select(4, a).copy_(
          y.narrow(1, (2 * a + b) * c, c).narrow(3, a, h).narrow(4, b, w));
    }
  }
  if (bias.defined()) out.add_(channel_view(bias));
}

// Decoder resample: [temporal ×2 (upsample3d)], then per frame nearest ×2 and a 3×3 conv C → C/2.
class Upsample : public Block {
 public:
  Upsample(Builder& b, const std::string& p, int64_t c, bool temporal)
      : channels_(c),
        spatial_(b.conv2d(p + ".resample.1", c / 2, c, 3)),
        temporal_(temporal),
        memory_format_(b.memory_format()),
        tuning_(&b.tuning()) {
    if (temporal) time_ = CausalConv(b, p + ".time_conv", 2 * c, c, 1);
    if (b.tuning().subpixel && spatial_.weight.defined()) {
      phase_weight_ = subpixel_weight(spatial_.weight).contiguous(memory_format_);
      spatial_.weight.reset();
    }
  }

  at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const override {
    if (temporal_ && !split_) x = upsample_time(x, st, first);
    // A tail tile's view of the previous block's output (the convs below want packed input).
    if (!x.is_contiguous(memory_format_)) x = x.contiguous(memory_format_);
    const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
    if (st.row_halo) return forward_rows(x, *st.row_halo);
    if (!phase_weight_.defined()) {
      x = at::upsample_nearest3d(x, {t, 2 * h, 2 * w});
      if (raw_ok(x, *tuning_)) {
        at::Tensor y = conv_raw(x, spatial_.weight, 1, tuning_->conv_frames);
        y.add_(channel_view(spatial_.bias));
        return y;
      }
      return conv(x, spatial_, {1, 1, 1}, {0, 1, 1});
    }
    at::Tensor y = raw_ok(x, *tuning_) ? conv_raw(x, phase_weight_, 1, tuning_->conv_frames)
                                       : conv(x, Conv{phase_weight_, {}}, {1, 1, 1}, {0, 1, 1});
    x.reset();
    at::Tensor out =
        at::empty({1, channels_ / 2, t, 2 * h, 2 * w}, y.options().memory_format(memory_format_));
    if (!(tuning_->fused && cuda::depth_to_space(y, spatial_.bias, out))) {
      depth_to_space_aten(y, spatial_.bias, out);
    }
    return out;
  }

  // Spatial parallelism: output row o reads source rows ⌊(o−1)/2⌋..⌊(o+1)/2⌋, so the band's
  // source rows with one row of each neighbouring band (zeros at the frame's edges) give
  // exactly the untiled output rows of the band.
  at::Tensor forward_rows(const at::Tensor& x, exec::HaloExchange& halo) const {
    const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
    at::Tensor buf =
        at::empty({1, x.size(1), t, h + 2, w}, x.options().memory_format(memory_format_));
    buf.narrow(3, 1, h).copy_(x);
    exchange_rows(halo, buf, 1);
    if (!phase_weight_.defined()) {
      // Nearest 2×: upsampled rows [2, 2h + 2) are the band's; one more above and below is
      // what the 3×3 conv reads.
      const at::Tensor up = at::upsample_nearest3d(buf, {t, 2 * (h + 2), 2 * w})
                                .narrow(3, 1, 2 * h + 2)
                                .contiguous(memory_format_);
      if (raw_ok(up, *tuning_)) {
        at::Tensor y = conv_raw(up, spatial_.weight, 1, tuning_->conv_frames, /*pad_h=*/0);
        y.add_(channel_view(spatial_.bias));
        return y;
      }
      return conv(up, spatial_, {1, 1, 1}, {0, 0, 1});
    }
    // The 2×2 sub-pixel conv over [row above | band | row below] without row padding: its
    // h + 1 output rows are the untiled conv's rows of this band (phase a of band row i reads
    // row i + a).
    at::Tensor y = raw_ok(buf, *tuning_)
                       ? conv_raw(buf, phase_weight_, 1, tuning_->conv_frames, /*pad_h=*/0)
                       : conv(buf, Conv{phase_weight_, {}}, {1, 1, 1}, {0, 0, 1});
    buf.reset();
    at::Tensor out =
        at::empty({1, channels_ / 2, t, 2 * h, 2 * w}, y.options().memory_format(memory_format_));
    if (!(tuning_->fused && cuda::depth_to_space(y, spatial_.bias, out))) {
      depth_to_space_aten(y, spatial_.bias, out);
    }
    return out;
  }

  // From now on forward() is the spatial part only; an UpsampleTime block runs the temporal
  // part before it (so frame chunking can start between the two).
  void split() { split_ = temporal_; }
  // Output pixel o reads source pixels ⌊(o−1)/2⌋..⌊(o+1)/2⌋ (nearest 2× then a 3×3 conv): an
  // output halo of h needs ⌈(h+1)/2⌉ source pixels before the core and ⌊h/2⌋ + 1 after it.
  int64_t input_halo(int64_t out) const override { return out / 2 + 1; }
  int64_t scale() const override { return 2; }

  // Sequence frame 0 passes through; every other frame f becomes (a_f, b_f) = the two channel
  // halves of the causal time conv over frames 1.. (frame 0 is not its context).
  at::Tensor upsample_time(const at::Tensor& x, SequenceState& st, bool first) const {
    const int64_t c = channels_, h = x.size(3), w = x.size(4);
    const int64_t keep = first ? 1 : 0, rest = x.size(2) - keep;
    at::Tensor out =
        at::empty({1, c, keep + 2 * rest, h, w}, x.options().memory_format(memory_format_));
    if (keep) out.narrow(2, 0, 1).copy_(x.narrow(2, 0, 1));
    // A large slice goes in chunks of 4 frames (the causal conv carries its history from chunk
    // to chunk, so this is exact): the time conv's [2C, n] output and padded input then stand
    // beside `out` a chunk at a time (at 1080p: 1.2 GB less at the decoder's peak, which is
    // here, just before the tail). Small ones go whole (fewer, larger calls).
    const int64_t out_bytes = 2 * c * rest * h * w * int64_t(x.element_size());
    int64_t chunk = out_bytes > (int64_t(1) << 30) ? 4 : std::max<int64_t>(rest, 1);
    if (tuning_->time_conv_frames > 0) chunk = tuning_->time_conv_frames;
    // A sequence-parallel rank runs the same chunks as one device: the time conv takes its
    // history before its first chunk and hands it on after its last (SequenceState::received,
    // sends), or with no frames passes it on. (It ran its whole part in one call: at 1080p a
    // whole slice of 8 latent frames made one call of 3.2 GB of output, a shape one device never
    // runs, for cuDNN's search to time.)
    if (st.halo && rest == 0) time_.relay(x, st);
    const bool sends = st.sends;
    for (int64_t f0 = 0; f0 < rest; f0 += chunk) {
      const int64_t n = std::min(chunk, rest - f0);
      if (st.halo) st.sends = sends && f0 + n >= rest;
      at::Tensor y = time_.forward(x.narrow(2, keep + f0, n), st);  // [1, 2C, n, H, W]
      out.narrow(2, keep + 2 * f0, 2 * n)
          .view({1, c, n, 2, h, w})
          .copy_(y.view({1, 2, c, n, h, w}).permute({0, 2, 3, 1, 4, 5}));
    }
    st.sends = sends;
    return out;
  }

 private:
  int64_t channels_;
  Conv spatial_;
  at::Tensor phase_weight_;  // sub-pixel form of spatial_.weight (then undefined)
  bool temporal_;
  bool split_ = false;
  CausalConv time_;
  at::MemoryFormat memory_format_;
  const Tuning* tuning_;
};

// The temporal part of a split Upsample (which must outlive it: both live in one Network).
class UpsampleTime : public Block {
 public:
  explicit UpsampleTime(const Upsample& up) : up_(up) {}
  at::Tensor forward(at::Tensor x, SequenceState& st, bool first) const override {
    return up_.upsample_time(x, st, first);
  }

 private:
  const Upsample& up_;
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
      : gamma_(b.gamma(p + ".0.gamma", in, 3)),
        conv_(b, p + ".2", out, in, 3),
        tuning_(&b.tuning()) {
    if (tuning_->raw_conv) conv_.pad_outputs(8);
  }
  at::Tensor forward(at::Tensor x, SequenceState& st, bool) const override {
    bool pending = false;
    at::Tensor y = conv_.run(
        x, st,
        [&](const at::Tensor& body) {
          norm_into(x, {}, gamma_, body, true, *tuning_);
          x.reset();
        },
        &pending);
    if (pending) y.add_(channel_view(conv_.bias()));
    return y;
  }
  int64_t input_halo(int64_t out) const override { return out + conv_.radius(); }
  std::vector<SlotInfo> slots() const override { return {{conv_.slot(), conv_.in_channels()}}; }

 private:
  at::Tensor gamma_;
  CausalConv conv_;
  const Tuning* tuning_;
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

bool parse_bool(const std::string& v) { return !(v == "0" || v == "false" || v == "off"); }

}  // namespace

Tuning Tuning::parse(const std::string& text) {
  Tuning t;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (item.empty()) continue;
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "1" : item.substr(eq + 1);
    try {
      if (key == "fused") {
        t.fused = parse_bool(value);
      } else if (key == "raw_conv") {
        t.raw_conv = parse_bool(value);
      } else if (key == "subpixel") {
        t.subpixel = parse_bool(value);
      } else if (key == "cudnn_benchmark") {
        t.cudnn_benchmark = parse_bool(value);
      } else if (key == "cudnn_benchmark_limit") {
        t.cudnn_benchmark_limit = std::stoi(value);
        if (t.cudnn_benchmark_limit < 0) throw std::invalid_argument(key);
      } else if (key == "conv_frames") {
        t.conv_frames = std::stoi(value);
      } else if (key == "tail_frames") {
        t.tail_frames = std::stoi(value);
      } else if (key == "tail_budget_mib") {
        t.tail_budget_mib = std::stoll(value);
      } else if (key == "tail_tiles") {  // RxC
        const size_t x = value.find('x');
        if (x == std::string::npos) throw std::invalid_argument(value);
        t.tail_rows = std::stoi(value.substr(0, x));
        t.tail_cols = std::stoi(value.substr(x + 1));
        // 0x0: auto (as str() writes the default)
        const bool automatic = t.tail_rows == 0 && t.tail_cols == 0;
        if (!automatic && (t.tail_rows < 1 || t.tail_cols < 1)) throw std::invalid_argument(value);
      } else if (key == "time_conv_frames") {
        t.time_conv_frames = std::stoi(value);
      } else if (key == "gemm_attention") {
        t.gemm_attention = std::stoi(value);
        if (t.gemm_attention < -1 || t.gemm_attention > 1) throw std::invalid_argument(key);
      } else if (key == "host_state") {
        t.host_state = std::stoi(value);
      } else if (key == "norm_threads") {
        t.norm_threads = std::stoi(value);
        if (t.norm_threads < 0 || t.norm_threads > 32 || (t.norm_threads & (t.norm_threads - 1)))
          throw std::invalid_argument(key);
      } else if (key == "part_latents") {
        t.part_latents = std::stoi(value);
        if (t.part_latents < 0) throw std::invalid_argument(key);
      } else if (key == "tile_shrink") {
        t.tile_shrink = parse_bool(value);
      } else {
        throw ModelError("wan2.1-vae tuning: unknown key '" + key + "'");
      }
    } catch (const std::logic_error&) {
      throw ModelError("wan2.1-vae tuning: bad value in '" + item + "'");
    }
  }
  return t;
}

std::string Tuning::str() const {
  std::ostringstream s;
  s << "fused=" << fused << ",raw_conv=" << raw_conv << ",subpixel=" << subpixel
    << ",cudnn_benchmark=" << cudnn_benchmark << ",cudnn_benchmark_limit=" << cudnn_benchmark_limit
    << ",conv_frames=" << conv_frames << ",tail_frames=" << tail_frames
    << ",tail_budget_mib=" << tail_budget_mib << ",tail_tiles=" << tail_rows << "x" << tail_cols
    << ",host_state=" << host_state << ",gemm_attention=" << gemm_attention
    << ",time_conv_frames=" << time_conv_frames << ",norm_threads=" << norm_threads
    << ",tile_shrink=" << tile_shrink << ",part_latents=" << part_latents;
  return s.str();
}

std::string TailPlan::str() const {
  std::ostringstream s;
  s << "frames=" << frames << ",tiles=" << rows << "x" << cols << ",host_state=" << host_state;
  return s.str();
}

void set_profiling(bool on) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.on = on;
}

std::vector<StageTime> take_profile() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  std::vector<StageTime> out;
  out.swap(p.stages);
  p.current = -1;
  return out;
}

Architecture Architecture::from(const ModelConfig& config) {
  const Wan21VaeOptions& o = options_as<Wan21VaeOptions>(config);
  Architecture a;
  a.dim = o.dim;
  a.z_dim = o.z_dim;
  a.dim_mult = o.dim_mult;
  a.num_res_blocks = o.num_res_blocks;
  a.temporal_down = o.temporal_downsample;
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
                 const at::Tensor& std, at::MemoryFormat memory_format, Tuning tuning)
    : task_(task), memory_format_(memory_format), tuning_(tuning), mean_(mean), std_(std) {
  Builder b(params, memory_format, tuning_);
  const std::vector<int64_t> dims = stage_dims(a, task);
  const int stages = int(a.dim_mult.size());
  const int64_t z = a.z_dim;
  auto add = [&](std::string name, std::unique_ptr<Block> block) {
    block_names_.push_back(std::move(name));
    blocks_.push_back(std::move(block));
  };
  auto add_middle = [&](const std::string& p, int64_t c) {
    add("mid.res0", std::make_unique<Residual>(b, p + ".0", c, c));
    add("mid.attn", std::make_unique<Attention>(b, p + ".1", c));
    add("mid.res1", std::make_unique<Residual>(b, p + ".2", c, c));
  };
  if (task == Task::kEncode) {
    add("conv_in", std::make_unique<InputConv>(b, "encoder.conv1", dims[0], 3));
    int index = 0;
    for (int i = 0; i < stages; ++i) {
      int64_t in = dims[size_t(i)];
      const int64_t out = dims[size_t(i) + 1];
      const std::string stage = "down" + std::to_string(i);
      for (int r = 0; r < a.num_res_blocks; ++r) {
        add(stage + ".res" + std::to_string(r),
            std::make_unique<Residual>(b, "encoder.downsamples." + std::to_string(index++), in,
                                       out));
        in = out;
      }
      if (i != stages - 1) {
        add(stage + ".resample",
            std::make_unique<Downsample>(b, "encoder.downsamples." + std::to_string(index++), out,
                                         a.temporal_down[size_t(i)]));
      }
    }
    add_middle("encoder.middle", dims.back());
    add("head", std::make_unique<Head>(b, "encoder.head", dims.back(), 2 * z));
    // Top-level conv1 (1×1×1, 2z → 2z); only mu, its first z output channels, is used.
    top_weight_ = b.param("conv1.weight", {2 * z, 2 * z, 1, 1, 1});
    top_bias_ = b.param("conv1.bias", {2 * z});
    if (top_weight_.defined()) {
      top_weight_ = top_weight_.narrow(0, 0, z).contiguous(memory_format);
      top_bias_ = top_bias_.narrow(0, 0, z).contiguous();
    }
    tail_start_ = blocks_.size();
  } else {
    top_weight_ = b.param("conv2.weight", {z, z, 1, 1, 1});
    top_bias_ = b.param("conv2.bias", {z});
    if (top_weight_.defined()) top_weight_ = top_weight_.contiguous(memory_format);
    add("conv_in", std::make_unique<InputConv>(b, "decoder.conv1", dims[0], z));
    add_middle("decoder.middle", dims[0]);
    int index = 0;
    for (int i = 0; i < stages; ++i) {
      const int64_t in = i == 0 ? dims[0] : dims[size_t(i)] / 2;
      const int64_t out = dims[size_t(i) + 1];
      const std::string stage = "up" + std::to_string(i);
      for (int r = 0; r <= a.num_res_blocks; ++r) {
        add(stage + ".res" + std::to_string(r),
            std::make_unique<Residual>(b, "decoder.upsamples." + std::to_string(index++),
                                       r == 0 ? in : out, out));
      }
      if (i != stages - 1) {
        const bool temporal = a.temporal_down[a.temporal_down.size() - 1 - size_t(i)];
        auto up = std::make_unique<Upsample>(b, "decoder.upsamples." + std::to_string(index++), out,
                                             temporal);
        if (temporal) {
          // Everything after the time conv is frame-local (or causal with carried state).
          up->split();
          add(stage + ".resample_t", std::make_unique<UpsampleTime>(*up));
          tail_start_ = blocks_.size();
          tail_in_channels_ = out;
        }
        add(stage + ".resample", std::move(up));
      }
    }
    add("head", std::make_unique<Head>(b, "decoder.head", dims.back(), 3));
    tail_channels_ = dims.back();
    int64_t scale = 1;
    for (size_t i = tail_start_; i < blocks_.size(); ++i) {
      for (const SlotInfo& info : blocks_[i]->slots()) {
        tail_slots_.push_back({info.slot, info.channels, i - tail_start_});
      }
      tail_block_scales_.push_back(scale);
      scale *= blocks_[i]->scale();
    }
    tail_scale_ = scale;
    tail_block_halos_.assign(blocks_.size() - tail_start_, 0);
    for (size_t i = blocks_.size(); i-- > tail_start_;) {
      tail_halo_ = blocks_[i]->input_halo(tail_halo_);
      tail_block_halos_[i - tail_start_] = tail_halo_;
    }
  }
  slots_ = b.slots();
}

Network::~Network() = default;

at::Tensor Network::run_block(size_t i, at::Tensor x, SequenceState& state, bool first) const {
  StageTimer timer(block_names_[i], x);
  return blocks_[i]->forward(std::move(x), state, first);
}

at::Tensor Network::forward(at::Tensor x, SequenceState& state, bool first) const {
  if (task_ == Task::kDecode) {
    // Without a memory limit: the tuning's tiles and chunks, else whole frames.
    at::Tensor out;
    forward_chunks(
        std::move(x), state, first,
        [&](const at::Tensor& in) { return auto_tail_plan(in.size(2), in.size(3), in.size(4), 0); },
        [&](const at::Tensor& y, const ChunkPos& p) {
          if (p.frame == 0 && p.top == 0 && p.left == 0 && y.size(2) == p.frames &&
              y.size(3) == p.height && y.size(4) == p.width) {
            out = y;
            return;
          }
          if (!out.defined()) {
            out = at::empty({1, y.size(1), p.frames, p.height, p.width}, y.options());
          }
          out.narrow(2, p.frame, y.size(2))
              .narrow(3, p.top, y.size(3))
              .narrow(4, p.left, y.size(4))
              .copy_(y);
        });
    return out;
  }
  if (state.slots.size() != size_t(slots_)) state.slots.resize(size_t(slots_));
  state.received.assign(size_t(slots_), 0);
  state.sends = true;
  for (size_t i = 0; i < blocks_.size(); ++i) x = run_block(i, std::move(x), state, first);
  const Conv top{top_weight_, top_bias_};
  x = conv(x, top);
  return x.sub_(mean_).div_(std_);
}

// A rectangle of a frame: rows [top, top + h), columns [left, left + w).
struct Region {
  int64_t top = 0, left = 0, h = 0, w = 0;
  int64_t area() const { return h * w; }
};

// A tile of the decode tail: the core it produces (tail-input pixels) and, per tail block, the
// region of that block's input it computes (at the block's resolution). regions[0] is the crop
// of the tail input it reads: the core plus the tail's halo, clipped to the frame. Later blocks'
// regions shrink with the halo still needed after them (Tuning::tile_shrink).
struct TailTile {
  Region core;
  std::vector<Region> regions;
  const Region& crop() const { return regions.front(); }
};

std::vector<TailTile> Network::tail_tiles(int64_t h, int64_t w, int rows, int cols) const {
  std::vector<TailTile> out;
  // [a·s − halo, b·s + halo) within [0, n·s).
  auto span = [](int64_t a, int64_t len, int64_t n, int64_t s, int64_t halo) {
    const int64_t lo = std::max<int64_t>(0, a * s - halo);
    return std::make_pair(lo, std::min(n * s, (a + len) * s + halo) - lo);
  };
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      TailTile t;
      t.core.top = h * r / rows;
      t.core.h = h * (r + 1) / rows - t.core.top;
      t.core.left = w * c / cols;
      t.core.w = w * (c + 1) / cols - t.core.left;
      for (size_t k = 0; k < tail_block_scales_.size(); ++k) {
        const int64_t s = tail_block_scales_[k];
        // Without shrinking, every block computes the whole crop (at its resolution).
        const int64_t halo = tuning_.tile_shrink ? tail_block_halos_[k] : tail_halo_ * s;
        Region g;
        std::tie(g.top, g.h) = span(t.core.top, t.core.h, h, s, halo);
        std::tie(g.left, g.w) = span(t.core.left, t.core.w, w, s, halo);
        t.regions.push_back(g);
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<std::pair<int, int>> Network::tail_grids(int64_t h, int64_t w) const {
  std::vector<std::pair<int, int>> grids;
  for (int n = 1; n <= 64; ++n) {
    std::vector<std::pair<int64_t, std::pair<int, int>>> same;
    for (int rows = 1; rows <= n; ++rows) {
      if (n % rows != 0) continue;
      int64_t area = 0;
      for (const TailTile& t : tail_tiles(h, w, rows, n / rows)) area += t.crop().area();
      same.push_back({area, {rows, n / rows}});
    }
    std::sort(same.begin(), same.end());
    for (const auto& g : same) grids.push_back(g.second);
  }
  return grids;
}

// Device buffers for the decode tail's causal state when it lives in host memory between
// slices (TailPlan::host_state): two sets, one for the tile computing and one for the next tile,
// whose state comes up meanwhile. Each set holds, per tail slot, a flat buffer sized for the
// largest tile; a tile's slots are views into it and the causal convs write their new state in
// place (SequenceState::write_in_place). The buffers are made once per sequence and reused by
// every tile of every slice, so there is no allocator churn and no host wait: on CUDA, copies
// run on an upload and a download stream ordered against the compute stream by events (a set is
// refilled only after its previous tile's state has been written back). On the CPU the same
// steps are plain copies (which keeps the in-place path under the CPU tests).
struct TailArena {
  std::array<std::vector<at::Tensor>, 2> flat;
  std::vector<TailTile> tiles;  // the grid the buffers were last used for
#ifdef WMBATCH_WITH_CUDA
  // Buffers just allocated from the compute stream's pool: a copy stream may write them only
  // after the compute stream's work queued so far (their memory's previous users).
  std::array<bool, 2> fresh{};
  std::optional<c10::cuda::CUDAStream> compute, up, down;
  std::array<at::cuda::CUDAEvent, 2> uploaded, released;
  std::array<bool, 2> was_released{};
#endif
  ~TailArena() {
#ifdef WMBATCH_WITH_CUDA
    // Copies may still be in flight into or out of buffers about to be freed.
    if (up) up->synchronize();
    if (down) down->synchronize();
#endif
  }
};

namespace {

// A [1, C, 2, h, w] view of the front of `flat` in `format`.
at::Tensor slot_view(const at::Tensor& flat, at::IntArrayRef sizes, at::MemoryFormat format) {
  int64_t numel = 1;
  for (int64_t v : sizes) numel *= v;
  at::Tensor front = flat.narrow(0, 0, numel);
  if (format != at::MemoryFormat::ChannelsLast3d) return front.view(sizes);
  return front.view({sizes[0], sizes[2], sizes[3], sizes[4], sizes[1]}).permute({0, 4, 1, 2, 3});
}

// Moves tiles' tail state between host tensors and the arena's buffer sets.
class ArenaMover {
 public:
  // `context`: the device worker, whose side streams carry the copies and whose pinned memory
  // holds the state (none: the calling thread's direct context).
  ArenaMover(TailArena& arena, bool cuda, exec::DeviceContext* context)
      : arena_(arena), cuda_(cuda) {
    (void)context;
#ifdef WMBATCH_WITH_CUDA
    if (cuda_) {
      const auto current = c10::cuda::getCurrentCUDAStream();
      context_ = &exec::context_for(context, at::Device(at::kCUDA, current.device_index()));
      if (!arena_.compute || *arena_.compute != current) {
        // A new compute stream (first use): the worker's side streams for the copies.
        arena_.compute = current;
        arena_.up = c10::cuda::CUDAStream(context_->side_stream(0));
        arena_.down = c10::cuda::CUDAStream(context_->side_stream(1));
      }
    }
#else
    cuda_ = false;
#endif
  }

  // Fills buffer set `set` with `host` (a tile's state; undefined entries: the sequence start,
  // zeros) as `views`, after the set's previous tile has been written back. Returns at once.
  void fill(int set, const std::vector<at::Tensor>& host, const std::vector<at::Tensor>& views) {
#ifdef WMBATCH_WITH_CUDA
    if (cuda_) {
      if (arena_.was_released[size_t(set)]) arena_.released[size_t(set)].block(*arena_.up);
      if (arena_.fresh[size_t(set)]) {
        at::cuda::CUDAEvent allocated;
        allocated.record(*arena_.compute);
        allocated.block(*arena_.up);
        arena_.fresh[size_t(set)] = false;
      }
      c10::cuda::CUDAStreamGuard guard(*arena_.up);
      for (size_t j = 0; j < views.size(); ++j) {
        if (host[j].defined()) {
          views[j].copy_(host[j], /*non_blocking=*/true);
        } else {
          views[j].zero_();
        }
      }
      arena_.uploaded[size_t(set)].record(*arena_.up);
      return;
    }
#endif
    (void)set;
    for (size_t j = 0; j < views.size(); ++j) {
      if (host[j].defined()) {
        views[j].copy_(host[j]);
      } else {
        views[j].zero_();
      }
    }
  }
  // Work queued on the compute stream from now on sees set `set` filled.
  void ready(int set) {
#ifdef WMBATCH_WITH_CUDA
    if (cuda_) arena_.uploaded[size_t(set)].block(*arena_.compute);
#endif
    (void)set;
  }
  // Queues copies of `views` (after the compute stream's work so far) into fresh host tensors
  // (pinned on CUDA) and returns those; the set may be refilled once they have landed.
  std::vector<at::Tensor> write_back(int set, const std::vector<at::Tensor>& views) {
    std::vector<at::Tensor> host(views.size());
#ifdef WMBATCH_WITH_CUDA
    if (cuda_) {
      at::cuda::CUDAEvent computed;
      computed.record(*arena_.compute);
      computed.block(*arena_.down);
      c10::cuda::CUDAStreamGuard guard(*arena_.down);
      for (size_t j = 0; j < views.size(); ++j) {
        host[j] = context_->host_empty_like(views[j], at::MemoryFormat::Preserve);
        host[j].copy_(views[j], /*non_blocking=*/true);
      }
      arena_.released[size_t(set)].record(*arena_.down);
      arena_.was_released[size_t(set)] = true;
      return host;
    }
#endif
    (void)set;
    for (size_t j = 0; j < views.size(); ++j) host[j] = views[j].clone();
    return host;
  }

 private:
  TailArena& arena_;
  bool cuda_;
  exec::DeviceContext* context_ = nullptr;  // CUDA: the worker's or the thread's direct one
};

}  // namespace

void Network::forward_chunks(at::Tensor x, SequenceState& state, bool first, const Planner& planner,
                             const Sink& sink) const {
  if (task_ == Task::kEncode) {
    at::Tensor y = forward(std::move(x), state, first);
    sink(y, ChunkPos{0, y.size(2), 0, 0, y.size(3), y.size(4)});
    return;
  }
  if (state.slots.size() != size_t(slots_)) state.slots.resize(size_t(slots_));
  // One call is one rank's part: every layer takes its history once and hands it on once.
  state.received.assign(size_t(slots_), 0);
  state.sends = true;
  // Views of the tail state buffer set `set` for tile t (TailArena).
  auto arena_views = [&](TailArena& arena, int set, const TailTile& t) {
    std::vector<at::Tensor> v(tail_slots_.size());
    for (size_t j = 0; j < v.size(); ++j) {
      v[j] = slot_view(arena.flat[size_t(set)][j], tail_slot_sizes(t, j), memory_format_);
    }
    return v;
  };
  // A later slice's first tile state (host memory) comes up while the layers before the tail
  // run: the grid cannot change within a sequence, so the arena fits it already.
  bool prefilled = false;
  if (!first && state.tail_arena && !state.tail_arena->tiles.empty() && !state.tail_tiles.empty()) {
    TailArena& arena = *state.tail_arena;
    ArenaMover(arena, x.is_cuda(), state.context)
        .fill(0, state.tail_tiles[0], arena_views(arena, 0, arena.tiles[0]));
    prefilled = true;
  }
  const Conv top{top_weight_, top_bias_};
  x = conv(x.mul(std_).add_(mean_), top);
  for (size_t i = 0; i < tail_start_; ++i) x = run_block(i, std::move(x), state, first);
  // After the last temporal upsample every layer maps frame f to frame f (causal convs carry
  // their two frames of history in `state`) and pixel p to a neighbourhood of p, so the tail can
  // run in frame chunks and (overlapping) spatial tiles exactly.
  TailPlan plan = planner ? planner(x) : TailPlan{};
  if (state.halo) {
    // Sequence-parallel ranks: the tiles' state passes from rank to rank (the grid is the
    // planner's, the same on every rank), never kept in host memory. Frame chunks are the
    // rank's own: a chunked layer takes its history before its first chunk and hands it on
    // after its last, so the next rank waits for this rank's whole tail (the planner prefers
    // whole frames, in more tiles).
    plan.host_state = false;
  }
  if (state.row_halo) {
    // Spatial-parallel ranks: the band is the tile (exchanging rows with the bands above and
    // below); frame chunks as the planner says, the same on every rank (so the ranks exchange
    // in step).
    plan.rows = plan.cols = 1;
    plan.host_state = false;
  }
  const int64_t frames = x.size(2), h = x.size(3), w = x.size(4), s = tail_scale_;
  // Chunks of at most plan.frames, of (nearly) equal length: 16 frames in 8s go 8 + 8, 13 go 7 + 6.
  int64_t step = plan.frames > 0 ? std::min(plan.frames, frames) : frames;
  const int64_t chunks = (frames + step - 1) / step;
  step = (frames + chunks - 1) / chunks;
  ChunkPos pos{0, frames, 0, 0, h * s, w * s};
  if (plan.tiles() == 1 && !plan.host_state) {
    for (int64_t f0 = 0; f0 < frames; f0 += step) {
      const int64_t n = std::min(step, frames - f0);
      state.sends = f0 + n >= frames;
      at::Tensor y = n == frames ? std::move(x) : x.narrow(2, f0, n);
      for (size_t i = tail_start_; i < blocks_.size(); ++i) {
        y = run_block(i, std::move(y), state, first);
      }
      pos.frame = f0;
      sink(y, pos);
    }
    state.sends = true;
    return;
  }

  const std::vector<TailTile> tiles = tail_tiles(h, w, plan.rows, plan.cols);
  if (first || state.tail_tiles.empty()) {
    state.tail_tiles.assign(tiles.size(), std::vector<at::Tensor>(tail_slots_.size()));
    state.tail_rows = plan.rows;
    state.tail_cols = plan.cols;
  } else if (state.tail_rows != plan.rows || state.tail_cols != plan.cols) {
    throw ModelError("wan2.1-vae: the decode tail's tile grid changed within a sequence");
  }
  const size_t count = tiles.size();
  // A tile's own state: its tail slots in a SequenceState of the network's shape.
  auto tile_state = [&](const std::vector<at::Tensor>& slots, bool in_place) {
    SequenceState tile;
    tile.slots.resize(size_t(slots_));
    tile.write_in_place = in_place;
    tile.context = state.context;
    tile.halo = state.halo;
    tile.received.assign(size_t(slots_), 0);
    for (size_t j = 0; j < tail_slots_.size(); ++j)
      tile.slots[size_t(tail_slots_[j].slot)] = slots[j];
    return tile;
  };
  if (!plan.host_state) {
    // Every tile's state stays on the device.
    for (size_t k = 0; k < count; ++k) {
      SequenceState tile = tile_state(state.tail_tiles[k], /*in_place=*/false);
      run_tail_tile(x, tiles[k], step, tile, first, pos, sink);
      for (size_t j = 0; j < tail_slots_.size(); ++j)
        state.tail_tiles[k][j] = tile.slots[size_t(tail_slots_[j].slot)];
    }
    return;
  }
  // State in host memory between slices, two tiles' worth of device buffers (TailArena).
  TailArena& arena = tail_arena(state, tiles, x.options());
  ArenaMover mover(arena, x.is_cuda(), state.context);
  auto views = [&](size_t k) { return arena_views(arena, int(k % 2), tiles[k]); };
  if (!prefilled) mover.fill(0, state.tail_tiles[0], views(0));
  for (size_t k = 0; k < count; ++k) {
    const int set = int(k % 2);
    const std::vector<at::Tensor> mine = views(k);
    // The next tile's state comes up while this one computes, into the other set (once the
    // tile before this one has been written back from it).
    if (k + 1 < count) mover.fill(1 - set, state.tail_tiles[k + 1], views(k + 1));
    mover.ready(set);
    SequenceState tile = tile_state(mine, /*in_place=*/true);
    run_tail_tile(x, tiles[k], step, tile, first, pos, sink);
    state.tail_tiles[k] = mover.write_back(set, mine);
  }
}

void Network::run_tail_tile(const at::Tensor& x, const TailTile& t, int64_t step,
                            SequenceState& tile, bool first, ChunkPos pos, const Sink& sink) const {
  const int64_t frames = x.size(2), s = tail_scale_;
  const Region& crop = t.crop();
  for (int64_t f0 = 0; f0 < frames; f0 += step) {
    const int64_t n = std::min(step, frames - f0);
    tile.sends = f0 + n >= frames;
    at::Tensor y = x.narrow(2, f0, n)
                       .narrow(3, crop.top, crop.h)
                       .narrow(4, crop.left, crop.w)
                       .contiguous(memory_format_);
    // Top-left of y (the previous block's output) at the next block's resolution.
    int64_t top = crop.top, left = crop.left;
    for (size_t i = tail_start_; i < blocks_.size(); ++i) {
      // The part of the previous block's output this block reads: a view (the fused kernels
      // and the blocks take strided input).
      const Region& g = t.regions[i - tail_start_];
      if (g.top != top || g.left != left || g.h != y.size(3) || g.w != y.size(4))
        y = y.narrow(3, g.top - top, g.h).narrow(4, g.left - left, g.w);
      y = run_block(i, std::move(y), tile, first);
      top = g.top * blocks_[i]->scale();
      left = g.left * blocks_[i]->scale();
    }
    y = y.narrow(3, t.core.top * s - top, t.core.h * s)
            .narrow(4, t.core.left * s - left, t.core.w * s);
    pos.frame = f0;
    pos.top = t.core.top * s;
    pos.left = t.core.left * s;
    sink(y, pos);
  }
}

std::vector<int64_t> Network::tail_slot_sizes(const TailTile& t, size_t j) const {
  const TailSlot& slot = tail_slots_[j];
  const Region& g = t.regions[slot.block];
  return {1, slot.channels, kCausalFrames, g.h, g.w};
}

int64_t Network::tail_slot_numel(const TailTile& t, size_t j) const {
  return tail_slots_[j].channels * kCausalFrames * t.regions[tail_slots_[j].block].area();
}

TailArena& Network::tail_arena(SequenceState& state, const std::vector<TailTile>& tiles,
                               const at::TensorOptions& options) const {
  if (!state.tail_arena) state.tail_arena = std::make_shared<TailArena>();
  TailArena& arena = *state.tail_arena;
  for (size_t j = 0; j < tail_slots_.size(); ++j) {
    int64_t largest = 0;
    for (const TailTile& t : tiles) largest = std::max(largest, tail_slot_numel(t, j));
    // One tile needs one set (nothing comes up while it computes).
    const size_t sets = tiles.size() > 1 ? arena.flat.size() : 1;
    for (size_t k = 0; k < sets; ++k) {
      std::vector<at::Tensor>& set = arena.flat[k];
      if (set.size() != tail_slots_.size()) set.resize(tail_slots_.size());
      if (!set[j].defined() || set[j].numel() < largest || set[j].dtype() != options.dtype() ||
          set[j].device() != options.device()) {
        set[j] = at::Tensor();
        set[j] = at::empty({largest}, options.memory_format(at::MemoryFormat::Contiguous));
#ifdef WMBATCH_WITH_CUDA
        arena.fresh[k] = true;
#endif
      }
    }
  }
  arena.tiles = tiles;
  return arena;
}

int64_t Network::tail_plan_bytes(const TailPlan& plan, int64_t frames, int64_t h, int64_t w) const {
  const int64_t elt = mean_.element_size();
  int64_t state_largest = 0, state_total = 0, crop_largest = 0, full_largest = 0;
  for (const TailTile& t : tail_tiles(h, w, plan.rows, plan.cols)) {
    int64_t state = 0;
    for (size_t j = 0; j < tail_slots_.size(); ++j) state += tail_slot_numel(t, j);
    state_largest = std::max(state_largest, state);
    state_total += state;
    crop_largest = std::max(crop_largest, t.crop().area());
    // The largest full-resolution activation: the output of a block at full resolution.
    for (size_t k = 0; k < t.regions.size(); ++k) {
      const int64_t out_scale = blocks_[tail_start_ + k]->scale();
      if (tail_block_scales_[k] * out_scale == tail_scale_) {
        full_largest = std::max(full_largest, t.regions[k].area() * out_scale * out_scale);
      }
    }
  }
  // Causal state of every tail layer: on the device for all tiles, or (in host memory between
  // slices) for the tile running and the next one being uploaded.
  int64_t bytes =
      elt * (plan.host_state ? (plan.tiles() > 1 ? 2 * state_largest : state_total) : state_total);
  // The tail input stays while the tiles run; each tile reads its crop of a chunk.
  const int64_t chunk = plan.frames > 0 ? std::min(plan.frames, frames) : frames;
  bytes += tail_in_channels_ * crop_largest * elt * chunk;
  // State kept on the device also stands through the next slice's layers before the tail, at
  // ~3 more activations of the tail input's size.
  if (!plan.host_state) bytes += 3 * tail_in_channels_ * h * w * elt * frames;
  // Live activations of the widest full-resolution width: a residual block holds its input,
  // the padded norm output (two more frames) and the conv output, plus the new state; 3n + 4
  // frames for n-frame chunks.
  return bytes + (3 * chunk + 4) * tail_channels_ * elt * full_largest;
}

TailPlan Network::more_tiles(const TailPlan& plan) const {
  TailPlan next = plan;
  next.host_state = true;
  for (const auto& [rows, cols] : tail_grids(plan.in_h, plan.in_w)) {
    if (rows * cols > plan.tiles()) {
      next.rows = rows;
      next.cols = cols;
      return next;
    }
  }
  next.cols *= 2;
  return next;
}

TailPlan Network::auto_tail_plan(int64_t frames, int64_t h, int64_t w, int64_t avail, TailRank rank,
                                 int rows, int cols) const {
  TailPlan plan;
  plan.in_h = h;
  plan.in_w = w;
  bool fixed_grid = tuning_.tail_rows > 0 && tuning_.tail_cols > 0;
  if (fixed_grid) {
    plan.rows = tuning_.tail_rows;
    plan.cols = tuning_.tail_cols;
  }
  if (rank == TailRank::kRows) {
    rows = 1;
    cols = 1;
  }
  if (rows > 0 && cols > 0) {
    fixed_grid = true;
    plan.rows = rows;
    plan.cols = cols;
  }
  // A rank's tail state passes to the next rank: on the device.
  const int host_state = rank == TailRank::kNone ? tuning_.host_state : 0;
  if (host_state >= 0) plan.host_state = host_state != 0;
  if (tuning_.tail_budget_mib > 0) avail = tuning_.tail_budget_mib << 20;
  // At most 16 frames per chunk (conv calls take ≤ 16 anyway), so the output's copy to the host
  // overlaps the later chunks; a time split's rank takes all its frames at once when it can.
  const int64_t most = tuning_.tail_frames > 0   ? std::min<int64_t>(tuning_.tail_frames, frames)
                       : rank == TailRank::kTime ? frames
                                                 : std::min<int64_t>(16, frames);
  if (avail <= 0) {
    plan.frames = tuning_.tail_frames > 0 ? most : frames;
    return plan;
  }
  // Chunk frames that fit `avail` with this grid and state placement (0: not one).
  auto fit = [&](const TailPlan& p) -> int64_t {
    // 1.4×: the allocator needs slack near a cap. With 1.2×, 1080p in 12 GiB on an H200 took
    // 1×5 tiles with 9-frame chunks by this estimate, and the allocator then freed its cache and
    // retried 5 times per run (19.3 fps); 2×3 tiles with 8-frame chunks had no retries (20.6).
    auto need = [&](int64_t n) {
      return tail_plan_bytes(TailPlan{n, p.rows, p.cols, p.host_state}, frames, h, w) * 7 / 5;
    };
    const int64_t one = need(1), two = need(2);
    if (one > avail) return 0;
    return std::min(most, 1 + (avail - one) / std::max<int64_t>(1, two - one));
  };
  std::vector<std::pair<int, int>> grids;
  if (fixed_grid) {
    grids.push_back({plan.rows, plan.cols});
  } else {
    grids = tail_grids(h, w);
  }
  // The first grid (state on the device before host memory) that takes chunks of 8 frames (a
  // time split's rank: all its frames); failing that, the one that takes the longest chunks.
  // (1080p in 12 GiB on an H200: 2×3 tiles with 8-frame chunks ran at 17 fps, 3×3 no slower,
  // 4-frame chunks at 13.5.)
  const int64_t want = rank == TailRank::kTime ? most : std::min<int64_t>(8, frames);
  int64_t best = 0;
  TailPlan chosen = plan;
  chosen.frames = 1;
  for (const auto& [grid_rows, grid_cols] : grids) {
    for (bool host : {false, true}) {
      if (host_state >= 0 && host != plan.host_state) continue;
      // One tile with its state in host memory saves nothing during the tail.
      if (host && grid_rows * grid_cols == 1 && host_state < 0) continue;
      const int64_t n = fit(TailPlan{0, grid_rows, grid_cols, host});
      if (n > best) {
        best = n;
        chosen = TailPlan{n, grid_rows, grid_cols, host, h, w};
      }
      if (n >= want) return chosen;
    }
  }
  return chosen;
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
