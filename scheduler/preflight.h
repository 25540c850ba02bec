// The checks of validated job files that need libav or the filesystem, made before any job of a
// run starts (wmbatch JOB..., and the farm commands before they plan), so a mistake in the last
// job of a file is found before the first one spends hours:
//  - encode.codec, encode.pix_fmt and encode.options are what the encoder takes
//    (io/encoder_check.h): ConfigError "job.yaml:9: encode.codec: no video encoder named
//    'libx246'" (exit 65);
//  - the output's container writes to a file (not HLS/DASH/segment, which write files themselves
//    and so cannot be written atomically): ConfigError at `output:` (exit 65). Images are
//    written atomically by the image task (io/image_output.h): a single image (`.png`, `.jpg`,
//    `.tif`, ...) needs an image input (ConfigError otherwise), a sequence (`%06d.png`) is a
//    folder written whole;
//  - two inputs of one job do not expand to one output (for a sequence: one folder):
//    ConfigError at `output:` naming both inputs and the output (exit 65);
//  - no output is an existing folder (a sequence's folder may exist: on_exists applies):
//    OutputError (exit 73).
//  - standard input is read by one input of the run, standard output written by one job of one
//    input (ConfigError, exit 65);
//  - every model.weights file exists and is readable (ConfigError with exit 66 at its line), and
//    a `torchscript` is not given a checkpoint of weights (a Real-ESRGAN .pth: exit 65, saying
//    to use `realesrgan`).
// For an image output without encode.codec, the encoder checked is the extension's (png, ...).
// Inputs are listed as the runner lists them (expand_inputs); a job whose inputs cannot be
// listed (a glob matching nothing) is left for the runner to report when it reaches it.
#pragma once

#include <string>
#include <vector>

#include "src/job_spec.h"

namespace wm::sched {

void preflight(const std::vector<JobSpec>& jobs);

// `output` (expanded from the job's template for `input`) is the kind of output the template
// makes: a "%d" that the input's name brings into an image output's file name ("50%d.png" with
// output out/{stem}.png) would make one image a numbered sequence whose folder (out/) is
// replaced whole. Throws ConfigError at `output:` (exit 65).
void check_output_kind(const JobSpec& job, const std::string& input, const std::string& output);

}  // namespace wm::sched
