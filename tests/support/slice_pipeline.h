// Latent frames decoded through the real pipeline (scheduler/pipeline.h) in slices and tiles:
// what the sequence- and spatial-parallel tests compare with one device.
#pragma once

#include <memory>
#include <vector>

#include "src/base/planar.h"
#include "src/model.h"

namespace wm::test {

// `z` [C, T, h, w] in slices of `slice_sizes` latent frames (summing to T), tiles of 6×6 latents
// overlapping by 4 (feathered, more than one tile), through run_pipeline on `sessions`; returns
// the slices' outputs joined in time.
Planar decode_in_pipeline(std::vector<std::unique_ptr<ModelSession>>& sessions, const Planar& z,
                          const ModelTraits& traits, std::vector<int> slice_sizes = {4, 5});

// `input` [C, T, h, w] run on `session` as one sequence in slices of `sizes` frames (summing to
// T), one call after another; `deferred`: each slice's output taken after the next slice was
// queued (RunContext::deferred, as the pipeline takes them), so a sequence-parallel session's
// slices overlap on its ranks. Returns the outputs joined in time.
Planar run_in_slices(ModelSession& session, const Planar& input, const std::vector<int>& sizes,
                     bool deferred = false);

}  // namespace wm::test
