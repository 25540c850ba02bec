// Farm stage "assemble": an output from the segments of its chunks. Internal to the farm
// (scheduler/farm*.cpp); the CLI contract is scheduler/farm.h, the watch daemon's
// scheduler/farm_input.h.
//
// Owns the chain of segments (from frame 0 to the end of the input, each the file its chunk row
// recorded, whole, its pts continuing the one before), the concatenation by stream copy (video
// segments: io/segments.h; latent segments along T: scheduler/latent_segments.h) with the source's
// audio and subtitles, and the output's rename into place, recorded before it happens
// (farm_journal.h record_committing) and after (the output row).
#pragma once

#include <string>

#include "scheduler/farm.h"
#include "scheduler/farm_plan.h"
#include "src/job_spec.h"

namespace wm::sched::farm {

// Assembles `in.output` from the segments its journal lists, unless the output is done (a
// whole-input chunk's output: checked only). `job_file`: named in the error when no chunk has
// run yet ("" when there is none: the watch daemon's input). Uses options.cancel and
// options.keep_segments (else the segments and causal states go). Throws wm::Error (1 when
// chunks are missing: run them, then assemble again).
void assemble_output(const JobSpec& job, const PlannedInput& in, const std::string& job_file,
                     const FarmOptions& options);

}  // namespace wm::sched::farm
