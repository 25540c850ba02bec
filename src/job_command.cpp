// One-line commands as job documents (job_command.h).
#include "src/job_command.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <utility>

#include "src/base/error.h"
#include "src/base/std_streams.h"
#include "src/models/catalog.h"
#include "src/models/registry.h"

namespace wm {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, char c) { return !s.empty() && s.back() == c; }

// `path` against `cwd`, lexically normal; standard input and output ("-", "pipe:0", ...) and
// templates that start with {dir} as they are.
std::string absolute(const std::string& path, const std::string& cwd) {
  if (is_stdin_name(path) || is_stdout_name(path) || path.rfind("{dir}", 0) == 0 || path.empty()) {
    return path;
  }
  const fs::path p(path);
  fs::path out = (p.is_absolute() ? p : fs::path(cwd) / p).lexically_normal();
  std::string text = out.string();
  if (text.size() > 1 && ends_with(text, '/')) text.pop_back();
  return text;
}

bool is_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// The option that sets a job key (a dotted key of an error line).
std::string option_of(const std::string& key) {
  const auto starts = [&key](const char* prefix) { return key.rfind(prefix, 0) == 0; };
  if (starts("input")) return "input";
  if (key == "output") return "-o";
  if (key == "model.scale") return "--scale";
  if (starts("model")) return "--model";
  if (key == "precision") return "--precision";
  if (starts("devices")) return "--devices";
  if (starts("tiling")) return "--tile";
  if (key == "encode.codec") return "--codec";
  if (key == "encode.crf") return "--crf";
  if (key == "encode.preset") return "--preset";
  if (key == "encode.pix_fmt") return "--pix-fmt";
  if (starts("encode")) return "--codec";
  if (key == "format") return "--format";
  if (key == "fps") return "--fps";
  if (key == "on_exists") return "-y/-n";
  return key;
}

}  // namespace

std::string command_job_yaml(const CommandJob& c) {
  if (c.inputs.empty()) {
    throw Error("no input given (wmbatch " + std::string(c.name) + " IN... -o OUT)", kExitUsage);
  }
  if (c.output.empty()) {
    throw Error(
        "no output given: -o FILE, -o FOLDER/, -o TEMPLATE (out/{stem}_x4.mkv) or -o - "
        "(standard output, with --format)",
        kExitUsage);
  }
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "job" << YAML::Value << c.name;
  out << YAML::Key << "task" << YAML::Value << to_string(c.task);

  out << YAML::Key << "input" << YAML::Value;
  if (c.inputs.size() == 1) {
    out << absolute(c.inputs.front(), c.cwd);
  } else {
    out << YAML::BeginSeq;
    for (const std::string& in : c.inputs) out << absolute(in, c.cwd);
    out << YAML::EndSeq;
  }

  // A folder: one output per input in it, named as the input (decode-latents: as a video).
  std::string output = c.output;
  if (!is_stdout_name(output) && (ends_with(output, '/') || is_folder(absolute(output, c.cwd)))) {
    output = absolute(output, c.cwd) + "/" +
             (c.task == Task::kDecodeLatents ? "{stem}.mp4" : "{stem}{ext}");
  } else {
    output = absolute(output, c.cwd);
  }
  out << YAML::Key << "output" << YAML::Value << output;
  if (!c.format.empty()) out << YAML::Key << "format" << YAML::Value << c.format;
  if (!c.on_exists.empty()) out << YAML::Key << "on_exists" << YAML::Value << c.on_exists;

  // The model: a kind by name (lanczos), a model name of the models folder, or a weights file.
  const bool kind_named = !c.model.empty() && find_model_kind(c.model) != nullptr;
  if (!c.model.empty() || !c.kind.empty() || !c.scale.empty()) {
    out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
    if (kind_named) {
      out << YAML::Key << "kind" << YAML::Value << c.model;
    } else if (!c.kind.empty()) {
      out << YAML::Key << "kind" << YAML::Value << c.kind;
    }
    if (!c.model.empty() && !kind_named) {
      std::error_code ec;
      const bool name = is_model_name(c.model) && !fs::exists(fs::path(c.cwd) / c.model, ec);
      out << YAML::Key << "weights" << YAML::Value << (name ? c.model : absolute(c.model, c.cwd));
    }
    if (!c.scale.empty()) out << YAML::Key << "scale" << YAML::Value << c.scale;
    out << YAML::EndMap;
  }
  if (!c.precision.empty()) out << YAML::Key << "precision" << YAML::Value << c.precision;
  if (!c.devices.empty()) {
    out << YAML::Key << "devices" << YAML::Value;
    std::vector<std::string> ids;
    size_t at = 0;
    while (at <= c.devices.size()) {
      const size_t end = std::min(c.devices.find(',', at), c.devices.size());
      ids.push_back(c.devices.substr(at, end - at));
      at = end + 1;
    }
    if (std::all_of(ids.begin(), ids.end(), all_digits)) {
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& id : ids) out << id;
      out << YAML::EndSeq;
    } else {
      out << c.devices;  // cpu, auto, or a mistake the parser names
    }
  }
  if (!c.tile.empty()) {
    out << YAML::Key << "tiling" << YAML::Value;
    if (c.tile == "auto" || c.tile == "none") {
      out << c.tile;
    } else if (c.tile == "0") {
      out << "none";  // Real-ESRGAN's script: --tile 0 is no tiling
    } else {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "tile" << YAML::Value << c.tile
          << YAML::EndMap;
    }
  }
  if (!c.fps.empty()) out << YAML::Key << "fps" << YAML::Value << c.fps;
  if (!c.codec.empty() || !c.crf.empty() || !c.preset.empty() || !c.pix_fmt.empty()) {
    out << YAML::Key << "encode" << YAML::Value << YAML::BeginMap;
    if (!c.codec.empty()) out << YAML::Key << "codec" << YAML::Value << c.codec;
    if (!c.crf.empty()) out << YAML::Key << "crf" << YAML::Value << c.crf;
    if (!c.preset.empty()) out << YAML::Key << "preset" << YAML::Value << c.preset;
    if (!c.pix_fmt.empty()) out << YAML::Key << "pix_fmt" << YAML::Value << c.pix_fmt;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) throw Error("cannot write the job: " + out.GetLastError(), kExitUsage);
  return std::string(out.c_str()) + "\n";
}

std::string command_error_text(const std::string& message, const std::string& origin) {
  if (message.rfind(origin + ":", 0) != 0) return message;
  static const std::regex line_key("^:[0-9]+: ([A-Za-z_]+(\\[[0-9]+\\])?(\\.[A-Za-z_-]+)*): ");
  static const std::regex line_only("^:[0-9]+: ");
  const std::string rest = message.substr(origin.size());
  std::smatch m;
  std::string text = message;
  if (std::regex_search(rest, m, line_key)) {
    text = origin + ": " + option_of(m[1].str()) + ": " + m.suffix().str();
  } else if (std::regex_search(rest, m, line_only)) {
    text = origin + ": " + m.suffix().str();
  }
  // A problem that names another key in its text.
  const std::string key = "give model.kind";
  if (const size_t at = text.find(key); at != std::string::npos) {
    text.replace(at, key.size(), "give --kind");
  }
  return text;
}

JobSpec parse_command_job(const CommandJob& command, const std::string& origin,
                          const std::string& rerun) {
  const std::string yaml = command_job_yaml(command);
  std::vector<JobSpec> jobs;
  try {
    jobs = parse_job_text(yaml, origin);
  } catch (const Error& e) {
    throw Error(command_error_text(e.what(), origin), e.exit_code());
  }
  JobSpec job = jobs.front();
  job.rerun = rerun;
  return job;
}

}  // namespace wm
