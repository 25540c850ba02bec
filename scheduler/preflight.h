// The checks of validated job files that need libav or the filesystem, made before any job of a
// run starts (wmbatch JOB..., and the farm commands before they plan), so a mistake in the last
// job of a file is found before the first one spends hours:
//  - encode.codec, encode.pix_fmt and encode.options are what the encoder takes
//    (io/encoder_check.h): ConfigError "job.yaml:9: encode.codec: no video encoder named
//    'libx246'" (exit 65);
//  - the output's container writes to a file (not image2/HLS/DASH, which write files themselves
//    and so cannot be written atomically): ConfigError at `output:` (exit 65);
//  - two inputs of one job do not expand to one output: ConfigError at `output:` naming both
//    inputs and the output (exit 65);
//  - no output is an existing folder: OutputError (exit 73).
// Inputs are listed as the runner lists them (expand_inputs); a job whose inputs cannot be
// listed (a glob matching nothing) is left for the runner to report when it reaches it.
#pragma once

#include <vector>

#include "src/job_spec.h"

namespace wm::sched {

void preflight(const std::vector<JobSpec>& jobs);

}  // namespace wm::sched
