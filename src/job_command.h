// One-line commands as jobs: `wmbatch upscale in.mp4 -o out.mp4 --model realesr-animevideov3`
// becomes the YAML document a job file would hold, which the job parser then validates like any
// job file (one code path: the same keys, checks and errors). `--print-job` prints that document,
// so a one-liner becomes a job file.
//
// What the options map to (docs/job-format.md has every key):
//   IN...            input (a file, a glob, a folder, "-" for standard input)
//   -o OUT           output: a file, a template with {stem} {ext} {job} {dir}, a folder (ends with
//                    '/' or exists: FOLDER/{stem}{ext}, decode-latents FOLDER/{stem}.mp4), "-"
//   --model M        lanczos | bicubic (built in), a model name of the models folder
//                    (src/models/catalog.h), or a weights file (kind from the table or extension)
//   --kind K         model.kind, when the file does not say
//   --scale N        model.scale          --tile N|auto   tiling
//   --precision P    precision            --devices D     devices
//   --codec/--crf/--preset/--pix-fmt      encode.*
//   --format F       format (standard output's container)
//   --fps F          fps (decode-latents)
//   -y / -n          on_exists: overwrite / skip (default fail)
// Paths are written absolute, so the printed job means the same wherever it is saved.
//
// Torch-free, libav-free.
#pragma once

#include <string>
#include <vector>

#include "src/job_spec.h"

namespace wm {

struct CommandJob {
  Task task = Task::kUpscale;
  std::string name;  // job name (default: the command, "upscale")
  std::vector<std::string> inputs;
  std::string output;
  std::string model;  // as given to --model; empty: the task's default
  std::string kind;
  std::string scale;  // options kept as text: the job parser checks them (and names the key)
  std::string tile;
  std::string precision;
  std::string devices;
  std::string codec;
  std::string crf;
  std::string preset;
  std::string pix_fmt;
  std::string format;
  std::string fps;
  std::string on_exists;  // "", overwrite, skip
  std::string cwd;        // relative paths resolve against it
};

// The job document (YAML) of a one-line command. Throws Error (kExitUsage) for what only the
// command line can get wrong (no input, no -o).
std::string command_job_yaml(const CommandJob& command);

// Parses command_job_yaml(command) as a job named `origin` ("wmbatch upscale"), whose relative
// paths resolve against command.cwd; `rerun` is the command line (JobSpec::rerun). Errors are
// rewritten to name the option, not a line of the generated text:
// "wmbatch upscale: --scale: must be 2, 3 or 4 (got 5)" (ConfigError, exit 65; 66 for a model
// that is not there).
JobSpec parse_command_job(const CommandJob& command, const std::string& origin,
                          const std::string& rerun);

// An error of a job made by parse_command_job, as the command line's: "ORIGIN:LINE: KEY: problem"
// becomes "ORIGIN: OPTION: problem". Other messages are returned as they are.
std::string command_error_text(const std::string& message, const std::string& origin);

}  // namespace wm
