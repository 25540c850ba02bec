// The SeedVR2 upscale of one batch with a probe on its intermediates (LibTorch side of
// seedvr2_upscale.h, whose torch-free seedvr2_upscale_batch is this without a probe).
#pragma once

#include "src/model.h"
#include "src/models/seedvr2/torch/seedvr2_dit.h"

namespace wm::models::seedvr2 {

// seedvr2_upscale_batch (seedvr2_upscale.h) with `probe` called on each intermediate of this
// rank's run, in pipeline order (tests that find where a run parts from another).
Planar upscale_batch_probed(const Model& model, const Planar& frames, const RunContext& ctx,
                            const DitProbe& probe);

}  // namespace wm::models::seedvr2
