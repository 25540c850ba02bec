// SeedVR2's diffusion transformer (NaDiT 3B / 7B), computing exactly ../shared/seedvr2-dit-spec.md
// §3–7 with ATen ops: time embedding, patchify, MM-DiT blocks with window attention (regular and
// shifted windows, window-local RoPE, text answered in every window and averaged), output norm,
// unpatchify. Architecture and key layout: seedvr2_dit_layout.h.
//
// Attention runs per group of windows of one shape: each group is one batched call over its
// windows, each window's sequence its own video tokens followed by all text tokens, so nothing is
// padded (`at::scaled_dot_product_attention` on LibTorch 2 on CUDA — flash attention in bf16/fp16
// —, an explicit softmax elsewhere). RoPE angles are computed for the positions a window uses,
// never cached as tables. The residual streams stay float32; norms, RoPE and softmax statistics
// are float32; matrix products run in the network's dtype.
//
// Weights: a DitNetwork is made on one device from host copies (DitParams). On CUDA, blocks that
// do not fit `resident_bytes` stay in pinned host memory and are streamed in ahead of use on the
// device worker's side stream 0 into a ring of device buffers (`prefetch` blocks ahead); float8
// weights (kByte tensors holding e4m3 bytes) stay float8 on the device or the host and are
// dequantised per block when it runs.
//
// Internal to src/models/ (seedvr2_upscale.cpp, tests, the benchmark). Immutable after
// construction except for the ring, so one forward at a time per network (the session's lock).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "src/models/seedvr2/seedvr2_dit_layout.h"

namespace wm::exec {
class DeviceContext;
class HaloExchange;
}  // namespace wm::exec

namespace wm::models::seedvr2 {

// Host copies of a DiT's parameters by key: float32, the compute dtype, or (CUDA networks that
// keep float8) kByte tensors holding float8 e4m3 bytes. Every key of dit_layout().
using DitParams = std::map<std::string, at::Tensor>;

// Gets every intermediate of a forward (debug): the spec's names (`t_sinusoid`, `time_emb`,
// `txt_tokens`, `vid_tokens` [T, H/2, W/2, dim], `block{i}_vid`, `block{i}_txt`, `vid_out_in`).
using DitProbe = std::function<void(const std::string& name, const at::Tensor& value)>;

struct DitOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // matrix products
  // CUDA: device bytes the blocks' weights may take (−1: all resident); the rest are streamed.
  int64_t resident_bytes = -1;
  int prefetch = 2;  // streamed blocks in flight ahead of the one running
  // CUDA bf16/fp16 networks: the fused element-wise passes of seedvr2_dit_kernels.h (RMSNorm with
  // modulation, gated residuals, SwiGLU, q/k norm + RoPE + packing into the attention's windows);
  // off: ATen ops only (the same function; rounding differs).
  bool fused = true;
  // Windows per attention call on the explicit path are cut so its scores stay under this.
  int64_t score_bytes = int64_t(256) << 20;
};

class DitNetwork {
 public:
  // Copies what it keeps out of `params` (which may be dropped afterwards).
  DitNetwork(const DitArchitecture& arch, const DitParams& params, const DitOptions& options);
  ~DitNetwork();
  DitNetwork(const DitNetwork&) = delete;
  DitNetwork& operator=(const DitNetwork&) = delete;

  // vid [T, H, W, in_channels] (channels last, H and W even), txt [L, txt_in_dim], the timestep
  // → [T, H, W, out_channels] float32 on the network's device. `context`: the device worker
  // (its side stream carries streamed blocks; null: one of LibTorch's pool).
  // `exchange` with more than one rank splits the forward (seedvr2_dit_split.h): every rank
  // calls it with the same inputs, runs its own windows, and returns the whole output.
  at::Tensor forward(const at::Tensor& vid, const at::Tensor& txt, double timestep,
                     const DitProbe& probe = {}, exec::DeviceContext* context = nullptr,
                     exec::HaloExchange* exchange = nullptr) const;

  const DitArchitecture& arch() const { return arch_; }
  const DitOptions& options() const { return options_; }
  int resident_blocks() const;
  // Bytes of one block's weights as stored on the device (the largest block).
  int64_t block_bytes() const;

  struct Block;
  struct Impl;

 private:
  DitArchitecture arch_;
  DitOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The timestep's sinusoid (spec §4.1), float32 arithmetic: [256] float32 on the CPU.
at::Tensor timestep_sinusoid(double timestep);

// Random parameters of `arch` as the golden data's were drawn (meta.json "init"): RMSNorm
// weights 1 + U(±0.25), ada scales 1 + U(±0.25), shifts and gates U(±0.25), linear weights
// U(±√(3/fan_in)), biases U(±0.1); RoPE buffers their computed values. Deterministic; matrices
// in `dtype`, the rest float32. Matrices of more than 2^22 values (the official shapes, never the
// golden ones) are tiled from one pool of 2^22 draws, each from its own offset (fast to make).
DitParams random_dit_params(const DitArchitecture& arch, uint64_t seed,
                            at::ScalarType dtype = at::kFloat);

// The RoPE frequency buffer upstream computes for `arch` (3B: 1/10000^(2j/r); 7B: "pixel").
at::Tensor dit_rope_freqs(const DitArchitecture& arch);

}  // namespace wm::models::seedvr2
