// Job files: YAML text → validated JobSpec. Each document is checked key by key in the order of
// JobSpec's fields; the first problem throws ConfigError with the line of the offending node.
#include "src/job_spec.h"

#include <fnmatch.h>
#include <glob.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <locale>
#include <map>
#include <new>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "src/base/error.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"
#include "src/media_names.h"
#include "src/models/catalog.h"
#include "src/models/registry.h"
#include "src/yaml_load.h"

namespace wm {

const char* to_string(Task t) {
  switch (t) {
    case Task::kUpscale:
      return "upscale";
    case Task::kDecodeLatents:
      return "decode_latents";
    case Task::kEncodeLatents:
      return "encode_latents";
    case Task::kReconstruct:
      return "reconstruct";
    case Task::kDit:
      return "dit";
  }
  return "?";
}

const char* to_string(OnExists o) {
  switch (o) {
    case OnExists::kFail:
      return "fail";
    case OnExists::kSkip:
      return "skip";
    case OnExists::kOverwrite:
      return "overwrite";
  }
  return "?";
}

const char* to_string(DecodeMode d) {
  switch (d) {
    case DecodeMode::kSoftware:
      return "software";
    case DecodeMode::kNvdec:
      return "nvdec";
    case DecodeMode::kAuto:
      return "auto";
  }
  return "?";
}

const char* to_string(FramePathMode f) {
  switch (f) {
    case FramePathMode::kAuto:
      return "auto";
    case FramePathMode::kDevice:
      return "device";
    case FramePathMode::kHost:
      return "host";
  }
  return "?";
}

const char* to_string(ParallelMode m) {
  switch (m) {
    case ParallelMode::kAuto:
      return "auto";
    case ParallelMode::kData:
      return "data";
    case ParallelMode::kSequence:
      return "sequence";
    case ParallelMode::kSpatial:
      return "spatial";
  }
  return "?";
}

void override_devices(JobSpec& job, const std::string& value) {
  if (value == "cpu" || value == "auto") {
    job.devices = value;
    job.device_ids.clear();
    return;
  }
  std::vector<int> ids;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t end = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, end - at);
    if (item.empty() || item.size() > 4 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      throw Error("--devices: '" + value + "' is not cpu, auto or GPU indices like 0,1",
                  kExitUsage);
    }
    ids.push_back(std::stoi(item));
    at = end + 1;
  }
  job.devices = "list";
  job.device_ids = ids;
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "fp32";
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
  }
  return "?";
}

namespace {

namespace fs = std::filesystem;

// Known keys of each map; `path` is the map's dotted prefix ("" for the top level).
struct KeyTable {
  std::string path;
  std::vector<std::string> keys;
};

// clang-format off
const KeyTable kTopKeys{
    "",
    {"job", "task", "input", "output", "on_exists", "model", "precision", "devices", "tiling",
     "slice_frames", "tokens", "encode", "fps", "input_tensor", "max_error_rate", "decode",
     "offload", "deinterlace", "parallel", "resolution", "debug_tensors", "frame_path", "format"}};
// clang-format on
// `kind` and every option key of the registry's kinds.
std::vector<std::string> model_keys() {
  std::vector<std::string> keys = {"kind"};
  for (const std::string& k : all_model_option_keys()) keys.push_back(k);
  return keys;
}
const KeyTable kModelKeys{"model", model_keys()};
const KeyTable kTilingKeys{"tiling", {"tile", "tile_width", "tile_height", "overlap", "exact"}};
const KeyTable kEncodeKeys{
    "encode",
    {"codec", "crf", "preset", "pix_fmt", "audio", "subtitles", "threads", "instances", "options"}};
const KeyTable kOffloadKeys{"offload", {"pinned_mib"}};
const KeyTable kParallelKeys{"parallel",
                             {"mode", "ranks", "inputs", "timeout", "exchange", "fault"}};
const KeyTable* const kAllTables[] = {&kTopKeys,    &kModelKeys,   &kTilingKeys,
                                      &kEncodeKeys, &kOffloadKeys, &kParallelKeys};

const char* const kX264Presets[] = {"ultrafast", "superfast", "veryfast", "faster",   "fast",
                                    "medium",    "slow",      "slower",   "veryslow", "placebo"};

// Placeholders of output templates.
const char* const kPlaceholders[] = {"stem", "ext", "job", "dir"};

// --- small text helpers -------------------------------------------------------------------------

// Edit distance with adjacent transpositions (optimal string alignment), case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b) {
  const auto low = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Close enough to be a typo of `known`: one edit for short words, two for longer ones.
bool is_typo_of(const std::string& word, const std::string& known) {
  const size_t limit = known.size() <= 4 ? 1 : 2;
  return edit_distance(word, known) <= limit;
}

std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& known) {
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const auto& k : known) {
    if (!is_typo_of(word, k)) continue;
    const size_t dist = edit_distance(word, k);
    if (!best || dist < best_distance) {
      best = k;
      best_distance = dist;
    }
  }
  return best;
}

// "a, b or c"
std::string one_of(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Lexically normal, without a trailing separator (except for "/").
std::string normal_path(const fs::path& p) {
  fs::path n = p.lexically_normal();
  if (!n.has_filename() && n.has_parent_path() && n != n.root_path()) n = n.parent_path();
  return n.string();
}

std::string resolve_path(const std::string& dir, const std::string& p) {
  const fs::path path(p);
  return normal_path(path.is_absolute() ? path : fs::path(dir) / path);
}

std::string absolute_dir(const std::string& dir) {
  return normal_path(fs::absolute(dir.empty() ? fs::path(".") : fs::path(dir)));
}

// `pattern` resolved against `dir`, with the glob characters of `dir` itself escaped.
std::string glob_pattern(const std::string& dir, const std::string& pattern) {
  std::string escaped;
  for (char c : dir) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return resolve_path(escaped, pattern);
}

// --- output templates ---------------------------------------------------------------------------

struct TemplateResult {
  std::string text;
  std::string error;           // empty: expanded
  std::set<std::string> used;  // placeholders that occur
};

// Expands `{name}` with value(name); `{{` and `}}` are literal braces; `{dir}` only at the start.
TemplateResult expand_template(const std::string& tmpl,
                               const std::function<std::string(const std::string&)>& value) {
  TemplateResult r;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
        r.text += '}';
        ++i;
        continue;
      }
      r.error = "unmatched '}' (write }} for a literal brace)";
      return r;
    }
    if (c != '{') {
      r.text += c;
      continue;
    }
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      r.text += '{';
      ++i;
      continue;
    }
    const size_t close = tmpl.find('}', i + 1);
    if (close == std::string::npos) {
      r.error = "unmatched '{' (write {{ for a literal brace)";
      return r;
    }
    const std::string name = tmpl.substr(i + 1, close - i - 1);
    const auto* known = std::find(std::begin(kPlaceholders), std::end(kPlaceholders), name);
    if (known == std::end(kPlaceholders)) {
      r.error = "unknown placeholder {" + name + "} (known: {stem} {ext} {job} {dir})";
      return r;
    }
    if (name == "dir" && i != 0) {
      r.error = "{dir} may only start the template (it is an absolute folder)";
      return r;
    }
    r.used.insert(name);
    r.text += value(name);
    i = close;
  }
  return r;
}

// {stem} of an input: the file name without its extension; for an image sequence
// ("shots/take1_%04d.png", "frames/%06d.png") that name without its printf number and the
// separators around it ("take1"), or the folder's name when nothing else is left ("frames").
// A file that exists is no sequence, whatever its name holds: "50%discount.mp4" is "50%discount".
std::string input_stem(const fs::path& input) {
  std::string stem = input.stem().string();
  const size_t percent = stem.find('%');
  if (percent == std::string::npos) return stem;
  std::error_code ec;
  if (fs::exists(input, ec)) return stem;
  size_t end = percent + 1;
  while (end < stem.size() && std::isdigit(static_cast<unsigned char>(stem[end]))) ++end;
  if (end >= stem.size() || stem[end] != 'd') return stem;
  stem.erase(percent, end + 1 - percent);
  const auto separator = [](char c) { return c == '_' || c == '-' || c == '.' || c == ' '; };
  while (!stem.empty() && separator(stem.back())) stem.pop_back();
  while (!stem.empty() && separator(stem.front())) stem.erase(0, 1);
  if (stem.empty()) stem = input.parent_path().filename().string();
  return stem;
}

// expand_output without the "is the input itself" check; returns the expansion or an error.
TemplateResult expand_output_path(const std::string& tmpl, const std::string& input_path,
                                  const std::string& job_name, const std::string& job_dir) {
  const std::string dir = absolute_dir(job_dir);
  const bool from_stdin = input_path == kStdinName;
  const fs::path input(from_stdin ? dir + "/stdin" : resolve_path(dir, input_path));
  TemplateResult r = expand_template(tmpl, [&](const std::string& name) -> std::string {
    if (name == "stem") return input_stem(input);
    if (name == "ext") return input.extension().string();  // stdin: none
    if (name == "job") return job_name;
    return normal_path(input.parent_path());  // "dir"
  });
  if (r.error.empty()) r.text = resolve_path(dir, r.text);
  return r;
}

// --- reading YAML nodes -------------------------------------------------------------------------

// A value found in a map: the node, its dotted key, the 1-based line to report, and the file.
struct Field {
  YAML::Node node;
  std::string key;
  int line = 0;
  const std::string* file = nullptr;
};

[[noreturn]] void fail(const Field& f, const std::string& problem) {
  throw ConfigError(*f.file, f.line, f.key, problem);
}

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  // yaml-cpp marks an empty value with the next token's position, and an alias with its
  // anchor's: neither is where the user looks.
  if (node.IsNull() || mark.is_null() || mark.line + 1 < fallback) return fallback;
  return mark.line + 1;
}

// Short description of a node for "(got ...)": one line, quoted text for scalars.
std::string got(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar: {
      std::string s = n.Scalar();
      const size_t cut = std::min(s.find('\n'), size_t{40});
      if (cut < s.size()) s = s.substr(0, cut) + "...";
      return (n.Tag() == "!" ? "the string '" : "'") + s + "'";
    }
    default:
      return "nothing";
  }
}

// Quoted and block scalars are strings even when they look like numbers.
std::string get_string(const Field& f) {
  if (!f.node.IsScalar()) fail(f, "must be a string (got " + got(f.node) + ")");
  if (f.node.Scalar().empty()) fail(f, "must not be empty");
  return f.node.Scalar();
}

long long get_int(const Field& f, long long min, long long max) {
  const std::optional<long long> read = yaml_integer(f.node);
  if (!read) fail(f, "must be an integer (got " + got(f.node) + ")");
  const long long v = *read;
  const std::string& s = f.node.Scalar();
  if (v < min) fail(f, "must be at least " + std::to_string(min) + " (got " + s + ")");
  if (v > max) fail(f, "must be at most " + std::to_string(max) + " (got " + s + ")");
  return v;
}

int get_int_in(const Field& f, const std::vector<int>& allowed) {
  const long long v = get_int(f, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    std::vector<std::string> words;
    for (int a : allowed) words.push_back(std::to_string(a));
    fail(f, "must be " + one_of(words) + " (got " + std::to_string(v) + ")");
  }
  return static_cast<int>(v);
}

std::string fmt_number(double v) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << v;
  return out.str();
}

// `parallel.fault` (test only): the grammar parallel::parse_fault reads.
bool valid_fault(const std::string& text) {
  static const std::regex grammar("rank[0-9]{1,4}:slice[0-9]{1,7}:(oom|error|hang)");
  return std::regex_match(text, grammar);
}

struct NumberRange {
  double min;
  double max;
  bool min_exclusive = false;
};

double get_number(const Field& f, NumberRange range) {
  const std::optional<double> read = yaml_number(f.node);
  if (!read) fail(f, "must be a number (got " + got(f.node) + ")");
  const double v = *read;
  const std::string text = f.node.Scalar();
  if (range.min_exclusive && v <= range.min) {
    fail(f, "must be greater than " + fmt_number(range.min) + " (got " + text + ")");
  }
  if (v < range.min) fail(f, "must be at least " + fmt_number(range.min) + " (got " + text + ")");
  if (v > range.max) fail(f, "must be at most " + fmt_number(range.max) + " (got " + text + ")");
  return v;
}

bool get_bool(const Field& f) {
  const std::optional<bool> v = yaml_flag(f.node);
  if (!v) fail(f, "must be true or false (got " + got(f.node) + ")");
  return *v;
}

// One of a few words, e.g. on_exists; suggests the closest on a typo.
template <typename T>
T get_enum(const Field& f, const std::vector<std::pair<std::string, T>>& choices) {
  std::vector<std::string> words;
  for (const auto& c : choices) words.push_back(c.first);
  if (f.node.IsScalar()) {
    for (const auto& c : choices) {
      if (c.first == f.node.Scalar()) return c.second;
    }
  }
  std::string problem = "must be " + one_of(words) + " (got " + got(f.node);
  if (f.node.IsScalar()) {
    if (auto guess = closest(f.node.Scalar(), words)) problem += "; did you mean `" + *guess + "`?";
  }
  fail(f, problem + ")");
}

// The elements of a list, each with its own key ("model.dim_mult[2]") and line.
std::vector<Field> get_list(const Field& f, size_t min_size, size_t max_size) {
  if (!f.node.IsSequence()) fail(f, "must be a list (got " + got(f.node) + ")");
  if (f.node.size() < min_size) {
    fail(f, min_size == 1 ? "must not be empty"
                          : "must have at least " + std::to_string(min_size) + " entries");
  }
  if (f.node.size() > max_size) {
    fail(f, "must have at most " + std::to_string(max_size) + " entries (got " +
                std::to_string(f.node.size()) + ")");
  }
  std::vector<Field> out;
  for (size_t i = 0; i < f.node.size(); ++i) {
    const YAML::Node item = f.node[i];
    out.push_back({item, f.key + "[" + std::to_string(i) + "]", line_of(item, f.line), f.file});
  }
  return out;
}

// A map's entries after checking every key: a scalar, known to `table`, not repeated.
class MapView {
 public:
  MapView(const Field& map, const KeyTable& table) : map_(map) {
    if (!map.node.IsMap()) fail(map, "must be a map of keys (got " + got(map.node) + ")");
    for (const auto& kv : map.node) {
      const int key_line = line_of(kv.first, map.line);
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const std::string path = table.path.empty() ? name : table.path + "." + name;
      const Field key_field{kv.first, path, key_line, map.file};
      if (!kv.first.IsScalar())
        fail({kv.first, table.path, key_line, map.file}, "keys must be words");
      if (std::find(table.keys.begin(), table.keys.end(), name) == table.keys.end()) {
        fail(key_field, "unknown key" + suggestion(name, table));
      }
      // A value is reported at its key's line: that is where a block map or list starts.
      const auto [it, fresh] = fields_.emplace(name, Field{kv.second, path, key_line, map.file});
      if (!fresh)
        fail(key_field, "repeated key (first at line " + std::to_string(it->second.line) + ")");
    }
  }

  const Field* find(const std::string& key) const {
    const auto it = fields_.find(key);
    return it == fields_.end() ? nullptr : &it->second;
  }
  const Field& require(const std::string& key) const {
    const Field* f = find(key);
    if (!f) fail(absent(key), "required");
    return *f;
  }
  // A stand-in for a key that is not there, for errors about its absence (the map's line).
  Field absent(const std::string& key) const {
    return {YAML::Node(), map_.key.empty() ? key : map_.key + "." + key, map_.line, map_.file};
  }
  int line() const { return map_.line; }

 private:
  // " (did you mean `x`?)": a typo of a key of this map, else a key of another map.
  static std::string suggestion(const std::string& name, const KeyTable& table) {
    if (auto guess = closest(name, table.keys)) return " (did you mean `" + *guess + "`?)";
    for (const KeyTable* other : kAllTables) {
      if (other == &table) continue;
      if (auto guess = closest(name, other->keys)) {
        if (other->path.empty()) return " (did you mean top-level `" + *guess + "`?)";
        return " (did you mean `" + other->path + "." + *guess + "`?)";
      }
    }
    std::string known;
    for (const auto& k : table.keys) known += (known.empty() ? "" : ", ") + k;
    return " (known keys: " + known + ")";
  }

  Field map_;
  std::map<std::string, Field> fields_;
};

// --- one job ------------------------------------------------------------------------------------

const std::vector<std::pair<std::string, Task>> kTasks = {{"upscale", Task::kUpscale},
                                                          {"decode_latents", Task::kDecodeLatents},
                                                          {"encode_latents", Task::kEncodeLatents},
                                                          {"reconstruct", Task::kReconstruct},
                                                          {"dit", Task::kDit}};
const std::vector<std::pair<std::string, OnExists>> kOnExists = {
    {"fail", OnExists::kFail}, {"skip", OnExists::kSkip}, {"overwrite", OnExists::kOverwrite}};
const std::vector<std::pair<std::string, Precision>> kPrecisions = {
    {"fp32", Precision::kFloat32}, {"bf16", Precision::kBFloat16}, {"fp16", Precision::kFloat16}};
const std::vector<std::pair<std::string, bool>> kCopyOrNone = {{"copy", true}, {"none", false}};
const std::vector<std::pair<std::string, DecodeMode>> kDecodeModes = {
    {"software", DecodeMode::kSoftware},
    {"nvdec", DecodeMode::kNvdec},
    {"auto", DecodeMode::kAuto}};
const std::vector<std::pair<std::string, FramePathMode>> kFramePathModes = {
    {"auto", FramePathMode::kAuto},
    {"device", FramePathMode::kDevice},
    {"host", FramePathMode::kHost}};
const std::vector<std::pair<std::string, DeinterlaceMode>> kDeinterlaceModes = {
    {"auto", DeinterlaceMode::kAuto},
    {"off", DeinterlaceMode::kOff},
    {"bwdif", DeinterlaceMode::kBwdif}};
const std::vector<std::pair<std::string, ParallelMode>> kParallelModes = {
    {"auto", ParallelMode::kAuto},
    {"data", ParallelMode::kData},
    {"sequence", ParallelMode::kSequence},
    {"spatial", ParallelMode::kSpatial}};

const std::vector<std::pair<std::string, bool>> kExchanges = {{"in-process", false},
                                                              {"nccl", true}};

// The model tasks a job task needs (reconstruct runs the encoder and the decoder).
std::vector<std::string> model_tasks(Task task) {
  switch (task) {
    case Task::kUpscale:
      return {"upscale"};
    case Task::kDecodeLatents:
      return {"decode"};
    case Task::kEncodeLatents:
      return {"encode"};
    case Task::kReconstruct:
      return {"encode", "decode"};
    case Task::kDit:
      return {"dit"};
  }
  return {};
}

// The registry's view of a validated `model:` map (registry.h): each getter checks the value
// with the job file's rules and fails at the key's line.
class ModelOptionReader : public OptionReader {
 public:
  ModelOptionReader(const MapView& map, const std::string& dir) : map_(map), dir_(dir) {}
  bool has(const std::string& key) const override { return map_.find(key) != nullptr; }
  long long get_int(const std::string& key, long long min, long long max) const override {
    return wm::get_int(field(key), min, max);
  }
  int get_int_in(const std::string& key, const std::vector<int>& allowed) const override {
    return wm::get_int_in(field(key), allowed);
  }
  double get_number(const std::string& key, double min, double max,
                    bool min_exclusive) const override {
    return wm::get_number(field(key), {min, max, min_exclusive});
  }
  bool get_bool(const std::string& key) const override { return wm::get_bool(field(key)); }
  std::string get_string(const std::string& key) const override {
    return wm::get_string(field(key));
  }
  std::string get_path(const std::string& key, const std::vector<std::string>& extensions,
                       const std::string& hint) const override {
    const Field& f = field(key);
    const std::string path = wm::get_string(f);
    // A model name (`weights: realesr-animevideov3`): a file of the models folder.
    std::error_code ec;
    if (is_model_name(path) && !fs::exists(resolve_path(dir_, path), ec)) {
      try {
        return find_model(path).path;
      } catch (const Error& e) {
        throw ConfigError(*f.file, f.line, f.key, e.what(), e.exit_code());
      }
    }
    if (!extensions.empty() && std::none_of(extensions.begin(), extensions.end(),
                                            [&](const auto& e) { return ends_with(path, e); })) {
      std::string problem = "must be a " + one_of(extensions) + " file";
      if (!hint.empty()) problem += " (" + hint + ")";
      wm::fail(f, problem);
    }
    const std::string resolved = resolve_path(dir_, path);
    // A model file that exists must be a file: reading a FIFO would wait for a writer (a missing
    // one is reported before any job runs, exit 66: scheduler/preflight.cpp).
    const auto status = fs::status(resolved, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
      wm::fail(f, resolved + " is " +
                      (fs::is_directory(status)               ? "a folder"
                       : status.type() == fs::file_type::fifo ? "a FIFO"
                                                              : "not a regular file") +
                      ", not a file to read");
    }
    return resolved;
  }
  std::vector<int> get_int_list(const std::string& key, size_t min_items, size_t max_items, int min,
                                int max) const override {
    std::vector<int> out;
    for (const Field& item : get_list(field(key), min_items, max_items)) {
      out.push_back(int(wm::get_int(item, min, max)));
    }
    return out;
  }
  std::vector<bool> get_bool_list(const std::string& key, size_t min_items,
                                  size_t max_items) const override {
    std::vector<bool> out;
    for (const Field& item : get_list(field(key), min_items, max_items)) {
      out.push_back(wm::get_bool(item));
    }
    return out;
  }
  std::vector<double> get_number_list(const std::string& key, size_t min_items, size_t max_items,
                                      double min, double max, bool min_exclusive) const override {
    std::vector<double> out;
    for (const Field& item : get_list(field(key), min_items, max_items)) {
      out.push_back(wm::get_number(item, {min, max, min_exclusive}));
    }
    return out;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const override {
    const Field* f = map_.find(key);
    wm::fail(f ? *f : map_.absent(key), problem);
  }

 private:
  const Field& field(const std::string& key) const { return map_.require(key); }
  const MapView& map_;
  std::string dir_;
};

class JobParser {
 public:
  JobParser(const Field& doc, const std::string& default_name) : top_(doc, kTopKeys) {
    job_.file = *doc.file;
    job_.dir = absolute_dir(fs::path(*doc.file).parent_path().string());
    job_.line = doc.line;
    job_.name = default_name;
  }

  JobSpec parse() {
    if (const Field* f = top_.find("job")) {
      job_.name = get_string(*f);
      if (job_.name.find_first_of("/\\") != std::string::npos) fail(*f, "must not contain '/'");
    }
    if (const Field* f = top_.find("task")) job_.task = get_enum(*f, kTasks);
    parse_inputs(top_.require("input"));
    parse_output(top_.require("output"));
    if (const Field* f = top_.find("on_exists")) job_.on_exists = get_enum(*f, kOnExists);
    parse_model();
    if (const Field* f = top_.find("precision")) job_.model.precision = get_enum(*f, kPrecisions);
    if (const Field* f = top_.find("devices")) parse_devices(*f);
    check_cpu_precision();
    if (const Field* f = top_.find("tiling")) parse_tiling(*f);
    if (const Field* f = top_.find("slice_frames")) {
      job_.slice_frames = get_int(*f, 0, 1 << 20);
      check_seedvr2_slices(*f);
    }
    if (const Field* f = top_.find("tokens")) job_.tokens = get_int(*f, 1, 1024);
    if (const Field* f = top_.find("offload")) {
      const MapView offload(*f, kOffloadKeys);
      if (const Field* p = offload.find("pinned_mib")) {
        job_.model.pinned_pool_bytes = get_int(*p, 1, 65536) << 20;
      }
    }
    if (const Field* f = top_.find("parallel")) {
      const MapView parallel(*f, kParallelKeys);
      if (const Field* m = parallel.find("mode")) job_.parallel.mode = get_enum(*m, kParallelModes);
      if (const Field* r = parallel.find("ranks")) job_.parallel.ranks = get_int(*r, 1, 1024);
      if (const Field* n = parallel.find("inputs")) job_.parallel.inputs = get_int(*n, 1, 1024);
      if (const Field* t = parallel.find("timeout")) {
        job_.parallel.timeout_seconds = get_number(*t, {0, 86400, true});
      }
      if (const Field* x = parallel.find("exchange")) {
        job_.parallel.nccl = get_enum(*x, kExchanges);
      }
      if (const Field* x = parallel.find("fault")) {
        job_.parallel.fault = get_string(*x);
        if (!valid_fault(job_.parallel.fault)) {
          fail(*x, "'" + job_.parallel.fault + "': expected rank<R>:slice<S>:<oom|error|hang>");
        }
      }
    }
    if (const Field* f = top_.find("encode")) parse_encode(*f);
    if (const Field* f = top_.find("fps")) {
      only_for_tasks(*f, {Task::kDecodeLatents});
      job_.fps = get_number(*f, {0, 1000, true});
    }
    if (const Field* f = top_.find("input_tensor")) {
      only_for_tasks(*f, {Task::kDecodeLatents, Task::kEncodeLatents, Task::kUpscale});
      job_.input_tensor = get_string(*f);
    } else if (job_.task == Task::kUpscale) {
      job_.input_tensor = "input";
    }
    if (const Field* f = top_.find("max_error_rate")) job_.max_error_rate = get_number(*f, {0, 1});
    if (const Field* f = top_.find("decode")) {
      // The tasks that read video (decode_latents reads a tensor file).
      only_for_tasks(*f, {Task::kUpscale, Task::kEncodeLatents, Task::kReconstruct});
      job_.decode = get_enum(*f, kDecodeModes);
    }
    if (const Field* f = top_.find("frame_path")) {
      only_for_tasks(*f, {Task::kUpscale});
      job_.frame_path = get_enum(*f, kFramePathModes);
    }
    if (const Field* f = top_.find("deinterlace")) {
      only_for_tasks(*f, {Task::kUpscale, Task::kEncodeLatents, Task::kReconstruct});
      job_.deinterlace = get_enum(*f, kDeinterlaceModes);
    }
    if (const Field* f = top_.find("resolution")) parse_resolution(*f);
    if (const Field* f = top_.find("debug_tensors")) {
      only_for_tasks(*f, {Task::kUpscale, Task::kDit});
      job_.debug_tensors = get_bool(*f);
      if (job_.debug_tensors && !ends_with(job_.output, ".safetensors")) {
        fail(*f, "needs a .safetensors output (the intermediates are tensors)");
      }
    }
    return job_;
  }

  const Field* name_field() const { return top_.find("job"); }

 private:
  void only_for_tasks(const Field& f, const std::vector<Task>& tasks) const {
    if (std::find(tasks.begin(), tasks.end(), job_.task) != tasks.end()) return;
    std::vector<std::string> names;
    for (Task t : tasks) names.push_back(to_string(t));
    fail(f, "applies only to task " + one_of(names) + " (task is " + to_string(job_.task) + ")");
  }

  void parse_inputs(const Field& f) {
    if (f.node.IsSequence()) {
      for (const Field& item : get_list(f, 1, 100000)) add_input(item);
    } else if (f.node.IsScalar()) {
      add_input(f);
    } else {
      fail(f, "must be a file, a glob or a list of them (got " + got(f.node) + ")");
    }
  }

  // One entry of `input`; standard input ("-", "pipe:0", "/dev/stdin") as "pipe:0", once.
  void add_input(const Field& f) {
    std::string input = get_string(f);
    if (is_stdin_name(input)) {
      if (std::find(job_.inputs.begin(), job_.inputs.end(), kStdinName) != job_.inputs.end()) {
        fail(f, "standard input is given twice (it can be read once)");
      }
      input = kStdinName;
    }
    job_.inputs.push_back(input);
    job_.input_lines.push_back(f.line);
  }

  bool is_folder_input(const std::string& input) const {
    std::error_code ec;
    return input != kStdinName && !has_glob_chars(input) &&
           fs::is_directory(resolve_path(job_.dir, input), ec);
  }

  // `output: -` (or pipe:1, /dev/stdout): a stream on standard output, in the container that
  // `format:` names; anything else with `format:` is an error.
  bool parse_stream_output(const Field& f, const std::string& tmpl) {
    const Field* format = top_.find("format");
    std::vector<std::pair<std::string, std::string>> formats;
    std::vector<std::string> keys;
    for (const StreamFormat& sf : kStreamFormats) {
      formats.emplace_back(sf.key, sf.muxer);
      keys.push_back(sf.key);
    }
    if (!is_stdout_name(tmpl)) {
      if (format) {
        fail(*format,
             "applies only to output: - (standard output); a file's extension picks "
             "its container");
      }
      return false;
    }
    if (job_.task == Task::kEncodeLatents || job_.task == Task::kReconstruct) {
      fail(f, std::string("standard output takes a video stream; task ") + to_string(job_.task) +
                  " writes files");
    }
    if (!format) {
      fail(f, "standard output needs format: " + one_of(keys) +
                  " (the container of the stream; a pipe cannot take mp4)");
    }
    job_.encode.container = get_enum(*format, formats);
    // Y4M holds raw pictures only.
    if (job_.encode.container == stream_muxer("y4m")) job_.encode.codec = "wrapped_avframe";
    job_.output = kStdoutName;
    return true;
  }

  void parse_output(const Field& f) {
    const std::string tmpl = get_string(f);
    job_.output_line = f.line;
    if (parse_stream_output(f, tmpl)) return;
    const TemplateResult check = expand_template(tmpl, [](const std::string&) { return "x"; });
    if (!check.error.empty()) fail(f, check.error);
    const bool several = job_.inputs.size() > 1 ||
                         std::any_of(job_.inputs.begin(), job_.inputs.end(), has_glob_chars) ||
                         std::any_of(job_.inputs.begin(), job_.inputs.end(),
                                     [this](const std::string& in) { return is_folder_input(in); });
    if (several && !check.used.count("stem")) {
      fail(f, "must contain {stem} when input names several files (they would all write one file)");
    }
    if (job_.task == Task::kEncodeLatents) {
      if (!ends_with(tmpl, ".safetensors")) fail(f, "must end with .safetensors (latents)");
    } else if (job_.task == Task::kDit) {
      if (!ends_with(tmpl, ".safetensors")) fail(f, "must end with .safetensors (task dit)");
    } else {
      // decode_latents may also write the decoded frames as a tensor (unclamped float32).
      // So may upscale (raw, unclamped network output; tests/golden runs).
      const bool tensor_out = job_.task == Task::kDecodeLatents || job_.task == Task::kUpscale;
      if ((ends_with(tmpl, ".safetensors") && !tensor_out) ||
          (job_.task == Task::kDecodeLatents && ends_with(tmpl, "{ext}"))) {
        fail(f, std::string("must name a video file such as {stem}.mp4 (task ") +
                    to_string(job_.task) + " writes video)");
      }
      const TemplateResult sample = expand_template(tmpl, [](const std::string& name) {
        return name == "ext" ? std::string(".mkv") : name == "dir" ? std::string("/d") : "x";
      });
      if (!fs::path(sample.text).has_extension()) {
        fail(f, "needs a file extension, which picks the container (e.g. {stem}.mp4)");
      }
    }
    // Expanding with the pattern itself as the input finds outputs that overwrite an input
    // (`{dir}/{stem}{ext}`) or that a later run would take as inputs (`*.mp4` → `{stem}_x2.mp4`).
    for (size_t i = 0; i < job_.inputs.size(); ++i) {
      const std::string input = resolve_path(job_.dir, job_.inputs[i]);
      const std::string out = expand_output_path(tmpl, input, job_.name, job_.dir).text;
      const std::string where =
          "'" + job_.inputs[i] + "' (line " + std::to_string(job_.input_lines[i]) + ")";
      if (out == input) fail(f, "would overwrite input " + where);
      const std::string pattern = glob_pattern(job_.dir, job_.inputs[i]);
      if (has_glob_chars(job_.inputs[i]) &&
          fnmatch(pattern.c_str(), out.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0) {
        fail(f, "outputs would match input " + where + "; write them to another folder");
      }
      // A folder's outputs in the folder itself would be its inputs next time.
      if (is_folder_input(job_.inputs[i]) && fs::path(out).parent_path() == input &&
          media_name_kind(out) != MediaName::kNone) {
        fail(f, "outputs would land in input folder " + where +
                    " and be taken as inputs by the next run; write them to another folder");
      }
    }
    job_.output = tmpl;
  }

  void parse_model() {
    ModelConfig& m = job_.model;
    switch (job_.task) {
      case Task::kUpscale:
        m.task = "upscale";
        break;
      case Task::kDecodeLatents:
        m.task = "decode";
        break;
      // reconstruct: the runner builds the decoder from the same config.
      case Task::kEncodeLatents:
      case Task::kReconstruct:
        m.task = "encode";
        break;
      case Task::kDit:
        m.task = "dit";
        break;
    }
    const std::vector<std::string> kinds = kinds_for_tasks(model_tasks(job_.task));
    const Field* f = top_.find("model");
    if (!f) {
      if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) {
        fail(top_.absent("model"), std::string("required for task ") + to_string(job_.task) +
                                       " (kind " + one_of(kinds) + ")");
      }
      return;
    }
    const MapView model(*f, kModelKeys);
    const Field* kind = model.find("kind");
    if (kind) {
      std::vector<std::pair<std::string, std::string>> all;
      for (const ModelKind& k : model_kinds()) all.emplace_back(k.name, k.name);
      m.kind = get_enum(*kind, all);
    } else if (const Field* w = model.find("weights")) {
      m.kind = kind_from_weights(*w);
    }
    if (const Field* w = model.find("weights")) job_.weights_line = w->line;
    if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) {
      fail(kind ? *kind : model.absent("kind"), std::string("task ") + to_string(job_.task) +
                                                    " needs kind " + one_of(kinds) + " (got " +
                                                    m.kind + ")");
    }
    const ModelKind& spec = *find_model_kind(m.kind);
    if (!spec.unavailable.empty()) fail(kind ? *kind : model.absent("kind"), spec.unavailable);
    for (const std::string& key : all_model_option_keys()) {
      const Field* k = model.find(key);
      if (k && std::find(spec.options.begin(), spec.options.end(), key) == spec.options.end()) {
        fail(*k, "applies only to kind " + one_of(kinds_with_option(key)));
      }
    }
    if (spec.parse) spec.parse(ModelOptionReader(model, job_.dir), m);
    // logvar (seedvr2-vae) is written by encode_latents only.
    if (const Field* f = model.find("logvar")) only_for_tasks(*f, {Task::kEncodeLatents});
  }

  // `resolution`: the output's short side (a number), or [height, width] of SeedVR2's official
  // area rule, which crops to multiples of 16 and so applies to .safetensors frames only.
  void parse_resolution(const Field& f) {
    only_for_tasks(f, {Task::kUpscale});
    const ModelKind* kind = find_model_kind(job_.model.kind);
    if (!kind || !kind->resolution) {
      std::vector<std::string> names;
      for (const ModelKind& k : model_kinds()) {
        if (k.resolution) names.push_back(k.name);
      }
      fail(f, "applies only to kind " + one_of(names) + " (kind is " + job_.model.kind +
                  "; other kinds take model.scale)");
    }
    if (f.node.IsSequence()) {
      const std::vector<Field> items = get_list(f, 2, 2);
      job_.model.resolution = {int(get_int(items[0], 16, 16384)),
                               int(get_int(items[1], 16, 16384))};
      for (size_t i = 0; i < job_.inputs.size(); ++i) {
        if (!ends_with(job_.inputs[i], ".safetensors")) {
          fail(f,
               "[height, width] (the official area rule, which crops the frame to multiples of "
               "16) applies to .safetensors inputs; for videos give the short side "
               "(resolution: 1080) or model.scale");
        }
      }
    } else {
      job_.model.resolution = {int(get_int(f, 16, 16384))};
    }
    if (const Field* m = top_.find("model"); m && m->node.IsMap() && m->node["scale"]) {
      fail(f, "give either resolution or model.scale, not both");
    }
  }

  // `weights:` without `kind:`: the kind its file implies (a released name or file: the table of
  // src/models/catalog.h; else .pt torchscript, .pt2 aoti, .pth realesrgan).
  std::string kind_from_weights(const Field& w) const {
    const std::string value = get_string(w);
    std::string kind;
    std::error_code ec;
    if (is_model_name(value) && !fs::exists(resolve_path(job_.dir, value), ec)) {
      try {
        kind = find_model(value).kind;
      } catch (const Error& e) {
        throw ConfigError(*w.file, w.line, w.key, e.what(), e.exit_code());
      }
    } else {
      kind = kind_of_weights(value);
    }
    if (kind.empty()) {
      fail(w, "cannot tell the model's kind from '" + value + "'; give model.kind");
    }
    return kind;
  }

  // An encoder whose stride-2 time convolutions carry frames between slices (seedvr2-vae) is
  // exact only when every slice after the first holds whole groups of its frames (spec §5).
  void check_seedvr2_slices(const Field& f) const {
    const bool encodes = job_.task == Task::kEncodeLatents || job_.task == Task::kReconstruct;
    const ModelKind* kind = find_model_kind(job_.model.kind);
    const int group = kind ? kind->encode_slice_group : 0;
    if (group <= 1 || !encodes || job_.slice_frames % group == 0) return;
    fail(f, "must be a multiple of " + std::to_string(group) + " for " + job_.model.kind +
                " encoding (got " + std::to_string(job_.slice_frames) +
                "): the encoder carries state between slices that is exact only for whole "
                "groups of " +
                std::to_string(group) + " frames after the first slice's 1 + slice_frames");
  }

  // A kind that runs only some precisions (registry: precisions), or some on the CPU
  // (cpu_precisions).
  void check_cpu_precision() const {
    const ModelKind* kind = find_model_kind(job_.model.kind);
    if (kind && !kind->precisions.empty() &&
        std::find(kind->precisions.begin(), kind->precisions.end(), job_.model.precision) ==
            kind->precisions.end()) {
      std::vector<std::string> names;
      for (Precision p : kind->precisions) names.push_back(to_string(p));
      const Field* f = top_.find("precision");
      fail(*f, std::string("kind ") + kind->name + " runs " + one_of(names) + " only, not " +
                   to_string(job_.model.precision) + " (leave precision out)");
    }
    if (job_.devices != "cpu" || !kind || kind->cpu_precisions.empty()) return;
    const auto& ok = kind->cpu_precisions;
    if (std::find(ok.begin(), ok.end(), job_.model.precision) != ok.end()) return;
    std::vector<std::string> names;
    for (Precision p : ok) names.push_back(to_string(p));
    const Field* f = top_.find("precision");
    fail(*f, std::string("kind ") + kind->name + " runs " + to_string(job_.model.precision) +
                 " on GPUs only; on devices: cpu use " + one_of(names));
  }

  void parse_devices(const Field& f) {
    if (f.node.IsScalar() && (f.node.Scalar() == "cpu" || f.node.Scalar() == "auto")) {
      job_.devices = f.node.Scalar();
      return;
    }
    if (!f.node.IsSequence()) {
      fail(f, "must be cpu, auto or a list of GPU indices like [0, 1] (got " + got(f.node) + ")");
    }
    job_.devices = "list";
    for (const Field& item : get_list(f, 1, 1024)) {
      const int id = get_int(item, 0, 1023);
      if (std::find(job_.device_ids.begin(), job_.device_ids.end(), id) != job_.device_ids.end()) {
        fail(item, "GPU " + std::to_string(id) + " is listed twice");
      }
      job_.device_ids.push_back(id);
    }
  }

  void parse_tiling(const Field& f) {
    TilingSpec& t = job_.tiling;
    if (f.node.IsScalar() && f.node.Scalar() == "none") return;
    if (f.node.IsScalar() && f.node.Scalar() == "auto") {
      t.enabled = t.automatic = true;
      job_.model.auto_tiles = true;
      return;
    }
    if (!f.node.IsMap()) {
      fail(f,
           "must be none, auto or a map like {tile: 512, overlap: 16} (got " + got(f.node) + ")");
    }
    const MapView tiling(f, kTilingKeys);
    const int max_tile = 1 << 16;
    const Field* tile = tiling.find("tile");
    const Field* width = tiling.find("tile_width");
    const Field* height = tiling.find("tile_height");
    if (tile) {
      if (width || height)
        fail(width ? *width : *height, "give either tile or tile_width/tile_height");
      t.tile_width = t.tile_height = get_int(*tile, 1, max_tile);
    } else if (width || height) {
      if (!width) fail(tiling.absent("tile_width"), "required with tiling.tile_height");
      if (!height) fail(tiling.absent("tile_height"), "required with tiling.tile_width");
      t.tile_width = get_int(*width, 1, max_tile);
      t.tile_height = get_int(*height, 1, max_tile);
    } else {
      fail(tiling.absent("tile"), "required (or tile_width and tile_height)");
    }
    t.enabled = true;
    if (const Field* o = tiling.find("overlap")) {
      t.overlap = get_int(*o, 0, max_tile);
      const int smallest = std::min(t.tile_width, t.tile_height);
      if (t.overlap >= smallest) {
        fail(*o, "must be less than the tile size " + std::to_string(smallest) + " (got " +
                     std::to_string(t.overlap) + ")");
      }
    }
    if (const Field* e = tiling.find("exact")) {
      t.exact = get_bool(*e);
      job_.model.exact_tiles = t.exact;
    }
    // The Wan and SeedVR2 encoders take frames whose sides are multiples of 8.
    const ModelKind* kind = find_model_kind(job_.model.kind);
    const int m = kind && job_.model.task == "encode" ? kind->encode_side_multiple : 0;
    if (m > 1 && (t.tile_width % m || t.tile_height % m)) {
      const Field& bad = tile ? *tile : t.tile_width % m ? *width : *height;
      fail(bad, "must be a multiple of " + std::to_string(m) + " for " + job_.model.kind +
                    " encoding (got " + bad.node.Scalar() + ")");
    }
  }

  void parse_encode(const Field& f) {
    if (job_.task == Task::kEncodeLatents) {
      fail(f, "applies only to tasks that write video (encode_latents writes latents)");
    }
    EncodeSpec& e = job_.encode;
    const MapView encode(f, kEncodeKeys);
    const auto word = [](const Field& field, const char* chars, const char* example) {
      const std::string s = get_string(field);
      if (s.find_first_not_of(chars) != std::string::npos) {
        fail(field, std::string("must be a libav name like ") + example + " (got '" + s + "')");
      }
      return s;
    };
    const char* const kNameChars =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    if (const Field* c = encode.find("codec")) {
      e.codec = word(*c, kNameChars, "libx264");
      e.codec_line = c->line;
    }
    if (const Field* c = encode.find("crf")) e.crf = get_int(*c, 0, 51);
    if (const Field* p = encode.find("preset")) {
      if (e.codec == "libx264" || e.codec == "libx265") {
        std::vector<std::pair<std::string, std::string>> presets;
        for (const char* name : kX264Presets) presets.emplace_back(name, name);
        e.preset = get_enum(*p, presets);
      } else {
        e.preset = get_string(*p);  // other encoders name their presets differently
      }
    }
    if (const Field* p = encode.find("pix_fmt")) {
      e.pix_fmt = word(*p, kNameChars, "yuv420p10le");
      e.pix_fmt_line = p->line;
    }
    if (const Field* a = encode.find("audio")) e.copy_audio = get_enum(*a, kCopyOrNone);
    if (const Field* s = encode.find("subtitles")) e.copy_subtitles = get_enum(*s, kCopyOrNone);
    if (const Field* t = encode.find("threads")) e.threads = get_int(*t, 0, 1024);
    if (const Field* n = encode.find("instances")) {
      e.instances = n->node.IsScalar() && n->node.Scalar() == "auto" ? 0 : get_int(*n, 1, 64);
    }
    if (const Field* o = encode.find("options")) {
      if (!o->node.IsMap()) fail(*o, "must be a map of encoder options (got " + got(o->node) + ")");
      std::map<std::string, int> seen;  // name → line: linear in the number of options
      for (const auto& kv : o->node) {
        const Field key{kv.first, o->key, line_of(kv.first, o->line), o->file};
        const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
        if (name.empty() || name.find_first_not_of(kNameChars) != std::string::npos) {
          fail(key, "keys must be libav option names like x264-params (got " + got(kv.first) + ")");
        }
        const Field value{kv.second, o->key + "." + name, key.line, o->file};
        if (!kv.second.IsScalar()) fail(value, "must be a scalar (got " + got(kv.second) + ")");
        const auto [first, fresh] = seen.emplace(name, key.line);
        if (!fresh) {
          fail(value, "repeated key (first at line " + std::to_string(first->second) + ")");
        }
        e.options.emplace_back(name, kv.second.Scalar());
        e.option_lines.push_back(key.line);
      }
    }
  }

  MapView top_;
  JobSpec job_;
};

// Top-level keys that choose what to read, where to write or how to schedule, but never the
// output's bits: left out of JobSpec::output_settings.
const char* const kKeysOutsideOutput[] = {"job",    "input",  "output", "on_exists",
                                          "tokens", "decode", "offload"};

// One "path: value" line per scalar under `node` (a validated job document).
void canonical_lines(const YAML::Node& node, const std::string& path,
                     std::vector<std::string>& out) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      for (const auto& kv : node) {
        const std::string key = kv.first.Scalar();
        if (path.empty() && std::find(std::begin(kKeysOutsideOutput), std::end(kKeysOutsideOutput),
                                      key) != std::end(kKeysOutsideOutput)) {
          continue;
        }
        canonical_lines(kv.second, path.empty() ? key : path + "." + key, out);
      }
      break;
    case YAML::NodeType::Sequence:
      for (size_t i = 0; i < node.size(); ++i) {
        canonical_lines(node[i], path + "[" + std::to_string(i) + "]", out);
      }
      break;
    case YAML::NodeType::Scalar: {
      std::string line = path + ": ";
      for (char c : node.Scalar()) {
        if (c == '\\' || c == '\n') line += '\\';
        line += c == '\n' ? 'n' : c;
      }
      out.push_back(std::move(line));
      break;
    }
    default:
      out.push_back(path + ": ~");
  }
}

std::string canonical_settings(const YAML::Node& doc) {
  std::vector<std::string> lines;
  canonical_lines(doc, "", lines);
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

}  // namespace

std::vector<JobSpec> parse_job_text(const std::string& text, const std::string& path) {
  std::vector<YAML::Node> all;
  try {
    all = load_yaml_documents(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, e.mark.is_null() ? 1 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  }
  // Empty documents (a stray `---`, a file of comments) are not jobs. (Copied, not erased:
  // assigning a YAML::Node rebinds the node it refers to, so std::remove_if would corrupt them.)
  std::vector<YAML::Node> docs;
  for (const YAML::Node& d : all) {
    if (!d.IsNull()) docs.push_back(d);
  }
  if (docs.empty()) throw ConfigError(path, 1, "", "no job in file (it is empty)");

  std::string stem = fs::path(path).stem().string();
  if (stem.empty()) stem = "job";
  std::vector<JobSpec> jobs;
  std::map<std::string, int> name_lines;
  for (size_t i = 0; i < docs.size(); ++i) {
    const int line = docs[i].Mark().is_null() ? 1 : docs[i].Mark().line + 1;
    const Field doc{docs[i], "", line, &path};
    if (!docs[i].IsMap()) fail(doc, "a job must be a map of keys (got " + got(docs[i]) + ")");
    JobParser parser(doc, docs.size() == 1 ? stem : stem + "-" + std::to_string(i + 1));
    jobs.push_back(parser.parse());
    jobs.back().output_settings = canonical_settings(docs[i]);
    const auto [it, fresh] = name_lines.emplace(jobs.back().name, line);
    if (!fresh) {
      const Field* name = parser.name_field();
      fail(name ? *name : doc, "job name '" + it->first + "' is also used by the job at line " +
                                   std::to_string(it->second));
    }
  }
  return jobs;
}

JobSpec parse_job_node(const YAML::Node& map, const std::string& path,
                       const std::string& default_name) {
  const Field doc{map, "", map.Mark().is_null() ? 1 : map.Mark().line + 1, &path};
  if (!map.IsMap()) fail(doc, "a job must be a map of keys (got " + got(map) + ")");
  return JobParser(doc, default_name).parse();
}

std::vector<JobSpec> load_job_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw Error(path + ": cannot open job file: " + std::strerror(EISDIR), kExitNoInput);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open job file: " + std::strerror(errno), kExitNoInput);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read job file: " + std::strerror(errno), kExitNoInput);
  return parse_job_text(text.str(), path);
}

std::string expand_output(const std::string& output_template, const std::string& input_path,
                          const std::string& job_name, const std::string& job_dir) {
  if (output_template == kStdoutName) return kStdoutName;
  const TemplateResult r = expand_output_path(output_template, input_path, job_name, job_dir);
  if (!r.error.empty()) {
    throw Error("output template '" + output_template + "': " + r.error, kExitDataErr);
  }
  if (r.text == resolve_path(absolute_dir(job_dir), input_path)) {
    throw Error("output '" + r.text + "' would overwrite its input", kExitDataErr);
  }
  return r.text;
}

namespace {

// The media files of a folder given as an input, by name; others are named in one warning.
std::vector<std::string> folder_files(const std::string& folder, const std::string& where) {
  std::vector<std::string> files;
  std::vector<std::string> left_out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code type_ec;
    if (name.empty() || name[0] == '.' || e.is_directory(type_ec)) continue;
    if (media_name_kind(name) == MediaName::kNone) {
      left_out.push_back(name);
    } else {
      files.push_back(normal_path(e.path()));
    }
  }
  if (ec) throw Error(where + ": cannot read the folder: " + ec.message(), kExitNoInput);
  std::sort(files.begin(), files.end());
  std::sort(left_out.begin(), left_out.end());
  if (!left_out.empty()) {
    std::string names;
    for (size_t i = 0; i < left_out.size() && i < 5; ++i) names += (i ? ", " : "") + left_out[i];
    if (left_out.size() > 5) names += ", ... (" + std::to_string(left_out.size()) + " in all)";
    log::get("job")->warn("{}: left out, not video, image or tensor files by their names: {}",
                          where, names);
  }
  if (files.empty())
    throw Error(where + ": the folder holds no video or image files", kExitNoInput);
  return files;
}

}  // namespace

std::vector<std::string> expand_inputs(const JobSpec& job) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  const auto add = [&](const std::string& file) {
    if (seen.insert(file).second) files.push_back(file);
  };
  for (size_t i = 0; i < job.inputs.size(); ++i) {
    const std::string& pattern = job.inputs[i];
    if (pattern == kStdinName) {
      add(pattern);
      continue;
    }
    const std::string path = resolve_path(job.dir, pattern);
    const int line = i < job.input_lines.size() ? job.input_lines[i] : job.line;
    const std::string where = job.file + ":" + std::to_string(line) + ": input: ";
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      for (const std::string& file : folder_files(path, where + pattern)) add(file);
      continue;
    }
    // A file whose name holds glob characters ("take[1].mp4") is taken as named.
    if (!has_glob_chars(pattern) || fs::exists(path, ec)) {
      add(path);
      continue;
    }
    glob_t found{};
    const int rc =
        glob(glob_pattern(job.dir, pattern).c_str(), GLOB_MARK | GLOB_NOSORT, nullptr, &found);
    std::vector<std::string> matches;
    for (size_t k = 0; rc == 0 && k < found.gl_pathc; ++k) {
      const std::string match = found.gl_pathv[k];
      if (!ends_with(match, "/")) matches.push_back(match);  // GLOB_MARK marks folders
    }
    globfree(&found);
    if (rc == GLOB_NOSPACE) throw std::bad_alloc();
    if (rc == GLOB_ABORTED) {
      throw Error(where + "cannot read the folders of '" + pattern + "'", kExitNoInput);
    }
    if (matches.empty()) throw Error(where + "no file matches '" + pattern + "'", kExitNoInput);
    std::sort(matches.begin(), matches.end());
    for (const auto& m : matches) add(m);
  }
  return files;
}

}  // namespace wm
