#include "scheduler/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "io/encoder_check.h"
#include "io/image_output.h"
#include "src/base/error.h"
#include "src/base/std_streams.h"
#include "src/models/catalog.h"
#include "src/models/registry.h"
#include "src/weights/torch_pickle.h"

namespace wm::sched {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ".png" of "out/a.png" ("" without one).
std::string extension(const std::string& path) {
  return path.substr(std::min(path.size(), path.find_last_of('.')));
}

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Whether an output of `job` is video encoded by its encoder (not a tensor file).
bool writes_video(const JobSpec& job, const std::string& output) {
  return job.task != Task::kEncodeLatents && !ends_with(output, ".safetensors");
}

void check_encoder(const JobSpec& job) {
  const EncodeSpec& e = job.encode;
  // Image outputs: the extension picks the encoder unless encode.codec is given.
  std::string codec = e.codec;
  if (!e.codec_line && io::image_path_kind(job.output) != io::ImagePath::kNone) {
    const std::string image_codec = io::image_encoder_for(job.output);
    if (!image_codec.empty()) codec = image_codec;
  }
  const auto problem = io::check_encoder(codec, e.pix_fmt, e.options);
  if (!problem) return;
  using Key = io::EncoderProblem::Key;
  switch (problem->key) {
    case Key::kCodec:
      throw ConfigError(job.file, e.codec_line ? e.codec_line : job.line, "encode.codec",
                        problem->message);
    case Key::kPixFmt:
      throw ConfigError(job.file, e.pix_fmt_line ? e.pix_fmt_line : job.line, "encode.pix_fmt",
                        problem->message);
    case Key::kOption: {
      const size_t i = problem->option;
      const int line = i < e.option_lines.size() ? e.option_lines[i] : job.line;
      throw ConfigError(job.file, line, "encode.options." + e.options.at(i).first,
                        problem->message);
    }
  }
}

}  // namespace

void check_output_kind(const JobSpec& job, const std::string& input, const std::string& output) {
  // The template filled from a plain name with the input's folder and extension.
  const size_t slash = input.find_last_of('/');
  const std::string name = slash == std::string::npos ? input : input.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  const std::string plain = (slash == std::string::npos ? "" : input.substr(0, slash + 1)) +
                            "input" +
                            (dot == std::string::npos || dot == 0 ? "" : name.substr(dot));
  std::string meant;
  try {
    meant = expand_output(job.output, plain, job.name, job.dir);
  } catch (const Error&) {
    return;
  }
  if (io::image_path_kind(output) == io::image_path_kind(meant)) return;
  throw ConfigError(job.file, job.output_line, "output",
                    output + ": the name of input " + input +
                        " puts a printf number (%d) into the output's file name, which would "
                        "make one image a numbered sequence; rename the input, or keep {stem} "
                        "out of the file name (e.g. out/{stem}/image.png)");
}

namespace {

// The encoder writes what the output holds (an image format, a codec its container stores):
// once per output extension, named at encode.codec when the job gives one, else at output.
void check_codec_for(const JobSpec& job, const std::string& output) {
  const EncodeSpec& e = job.encode;
  std::string codec = e.codec;
  if (!e.codec_line && io::image_path_kind(output) != io::ImagePath::kNone) {
    codec = io::image_encoder_for(output);
    if (codec.empty()) return;
  }
  if (const auto problem = io::check_codec_for_output(output, codec)) {
    if (e.codec_line) throw ConfigError(job.file, e.codec_line, "encode.codec", *problem);
    throw ConfigError(job.file, job.output_line, "output", output + ": " + *problem);
  }
}

void check_outputs(const JobSpec& job) {
  if (job.output == kStdoutName) return;  // a stream in a container of kStreamFormats
  // A template's own extension is checked even when no input is there yet.
  if (writes_video(job, job.output) && extension(job.output).find('{') == std::string::npos) {
    check_codec_for(job, job.output);
  }
  std::vector<std::string> inputs;
  try {
    inputs = expand_inputs(job);
  } catch (const Error&) {
    return;  // the runner reports it for this job, and runs the others
  }
  std::map<std::string, std::string> writer_of;  // output → the input that writes it
  std::set<std::string> containers_checked;
  for (const std::string& input : inputs) {
    std::string output;
    try {
      output = expand_output(job.output, input, job.name, job.dir);
    } catch (const Error&) {
      continue;  // the runner reports it for this input
    }
    check_output_kind(job, input, output);
    // An image sequence is written as its folder: two sequences in one folder collide.
    const io::ImagePath image = io::image_path_kind(output);
    const std::string target = io::output_target(output);
    const auto [first, fresh] = writer_of.emplace(target, input);
    if (!fresh) {
      throw ConfigError(job.file, job.output_line, "output",
                        "inputs " + first->second + " and " + input + " would both write " +
                            target + " (make the template tell them apart, e.g. with {ext} or " +
                            "{dir})");
    }
    if (image == io::ImagePath::kImage && !ends_with(input, ".safetensors") &&
        io::input_image_kind(input) != io::ImagePath::kImage) {
      throw ConfigError(
          job.file, job.output_line, "output",
          output + ": a single-image output takes an image input; " + input + " is " +
              (io::input_image_kind(input) == io::ImagePath::kSequence ? "an image sequence"
                                                                       : "a video") +
              " (write a sequence such as out/{stem}/%06d.png, or a video)");
    }
    if (image == io::ImagePath::kSequence) {
      // The folder is replaced whole: it may not hold what the run reads.
      if (io::path_within(input, target) || io::path_within(job.dir, target)) {
        throw ConfigError(job.file, job.output_line, "output",
                          output + ": an image sequence's folder (" + target +
                              ") is written whole and may not hold the input " + input +
                              " or the job file; give the sequence a folder of its own (e.g. "
                              "out/{stem}/%06d.png)");
      }
      if (containers_checked.insert(extension(output)).second) check_codec_for(job, output);
      continue;  // its folder may exist (on_exists)
    }
    if (is_folder(output)) {
      throw OutputError(output + ": output is an existing folder (input " + input + ")",
                        kExitCantCreat);
    }
    if (!writes_video(job, output)) continue;
    if (!containers_checked.insert(extension(output)).second) continue;
    if (image == io::ImagePath::kNone) {
      if (const auto problem = io::check_container(output)) {
        throw ConfigError(job.file, job.output_line, "output", output + ": " + *problem);
      }
    }
    check_codec_for(job, output);
  }
}

// The weights file is there and readable (exit 66 before any input runs), and is what its kind
// reads: a `torchscript` given a state dict (a Real-ESRGAN .pth) is told to use `realesrgan`.
void check_weights(const JobSpec& job) {
  const std::string& path = job.model.weights;
  if (path.empty()) return;
  const int line = job.weights_line ? job.weights_line : job.line;
  struct stat st {};
  const int err = ::stat(path.c_str(), &st) != 0      ? errno
                  : S_ISDIR(st.st_mode)               ? EISDIR
                  : ::access(path.c_str(), R_OK) != 0 ? errno
                                                      : 0;
  if (err) {
    throw ConfigError(job.file, line, "model.weights", path + ": " + std::strerror(err),
                      kExitNoInput);
  }
  const ModelKind* kind = find_model_kind(job.model.kind);
  if (!kind || !kind->loads_modules) return;
  const ReleasedModel* released =
      model_catalog().find_file(path.substr(path.find_last_of('/') + 1));
  const ModelKind* released_kind = released ? find_model_kind(released->kind) : nullptr;
  bool state_dict = released_kind && !released_kind->loads_modules;
  if (!state_dict) {
    try {
      state_dict = !io::TorchCheckpoint(path).top_level().empty();  // tensors only: no module
    } catch (const Error&) {
      // Not a plain torch.save of tensors: a TorchScript archive (its loader judges it).
    }
  }
  if (state_dict) {
    throw ConfigError(job.file, line, "model.weights",
                      path +
                          " is a checkpoint of weights (torch.save), not a TorchScript "
                          "module; for a Real-ESRGAN .pth use kind: realesrgan" +
                          (released ? " (it is " + released->name + ")" : std::string()));
  }
}

// Standard input and output (src/base/std_streams.h): a stream on standard output takes one
// input; standard input is read by one input of one job.
void check_streams(const std::vector<JobSpec>& jobs) {
  int stdin_readers = 0;
  for (const JobSpec& job : jobs) {
    std::vector<std::string> inputs;
    try {
      inputs = expand_inputs(job);
    } catch (const Error&) {
      continue;  // the runner reports it for this job
    }
    stdin_readers += int(std::count(inputs.begin(), inputs.end(), std::string(kStdinName)));
    if (stdin_readers > 1) {
      throw ConfigError(job.file, job.line, "input",
                        "standard input is read by two jobs of this run (it can be read once)");
    }
    if (job.output == kStdoutName && inputs.size() > 1) {
      throw ConfigError(job.file, job.output_line, "output",
                        "standard output takes one input's stream (the inputs give " +
                            std::to_string(inputs.size()) + " files)");
    }
  }
  const auto writers = std::count_if(jobs.begin(), jobs.end(),
                                     [](const JobSpec& j) { return j.output == kStdoutName; });
  if (writers > 0 && ::isatty(STDOUT_FILENO)) {
    const JobSpec& job = *std::find_if(jobs.begin(), jobs.end(),
                                       [](const JobSpec& j) { return j.output == kStdoutName; });
    throw ConfigError(job.file, job.output_line, "output",
                      "standard output is a terminal; pipe it into a program (| ffmpeg -i - "
                      "...) or give a file",
                      kExitUsage);
  }
  if (writers > 1) {
    const JobSpec& second =
        *std::find_if(std::find_if(jobs.begin(), jobs.end(),
                                   [](const JobSpec& j) { return j.output == kStdoutName; }) +
                          1,
                      jobs.end(), [](const JobSpec& j) { return j.output == kStdoutName; });
    throw ConfigError(second.file, second.output_line, "output",
                      "standard output is written by two jobs of this run (one stream only)");
  }
}

}  // namespace

void preflight(const std::vector<JobSpec>& jobs) {
  for (const JobSpec& job : jobs) {
    if (job.task != Task::kEncodeLatents && !ends_with(job.output, ".safetensors")) {
      check_encoder(job);
    }
  }
  for (const JobSpec& job : jobs) check_outputs(job);
  check_streams(jobs);
  for (const JobSpec& job : jobs) check_weights(job);
}

}  // namespace wm::sched
