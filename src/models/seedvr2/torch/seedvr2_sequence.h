// How the SeedVR2 upscaler (src/models/seedvr2/torch/seedvr2_upscale.cpp) runs its VAE sessions: a
// whole sequence already on the session's device in, its whole output on that device out, from a
// fresh causal state — no host round trip between the upscaler's stages (the frames, the
// posterior and the decoded frames stay where the DiT and the colour fix run). The sessions of
// make_seedvr2_vae derive from this. Include only from LibTorch translation units.
#pragma once

#include <ATen/ATen.h>

#include "src/model.h"

namespace wm::models {

class Seedvr2SequenceSession {
 public:
  virtual ~Seedvr2SequenceSession() = default;
  // x [1, C, T, H, W] (any float dtype, any device) → the network's output [1, C', T', H', W']
  // on the session's device in its compute dtype (the encoder: the posterior mean, and the
  // log-variance where the model was made with it). Uses ctx.device (a device worker's
  // context) when set; slices, tiles and ranks do not apply.
  virtual at::Tensor run_sequence(const at::Tensor& x, const RunContext& ctx) = 0;
};

}  // namespace wm::models
