// WATCH.yaml → WatchSpec. Each key is checked in the order of WatchSpec's fields; jobs are
// checked by the job file parser itself (parse_job_node), with the folder's patterns as input.
#include "watch/watch_spec.h"

#include <fnmatch.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "scheduler/farm.h"
#include "scheduler/journal.h"
#include "src/base/error.h"

namespace wm::watch {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopKeys = {"queue",        "poll_seconds", "settle_seconds",
                                           "max_parallel", "chunk_frames", "retry",
                                           "http",         "watch"};
const std::vector<std::string> kEntryKeys = {"folder", "recursive", "patterns",    "job",
                                             "output", "on_done",   "done_folder", "failed_folder"};
const std::vector<std::string> kRetryKeys = {"max_attempts", "backoff_seconds",
                                             "backoff_max_seconds"};
const std::vector<std::string> kHttpKeys = {"listen"};

// Container patterns taken by default: what the video tasks read, or latents.
const std::vector<std::string> kVideoPatterns = {"*.mp4", "*.mov", "*.mkv", "*.avi", "*.webm",
                                                 "*.mxf", "*.m4v", "*.ts",  "*.mts", "*.y4m"};

// A node of WATCH.yaml with the key path and line its errors name.
struct Value {
  YAML::Node node;
  std::string key;
  int line;
  const std::string* file;

  [[noreturn]] void fail(const std::string& problem) const {
    throw ConfigError(*file, line, key, problem);
  }
  std::string shown() const {
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    if (node.IsScalar()) return "'" + node.Scalar() + "'";
    return "nothing";
  }
  std::string text() const {
    if (!node.IsScalar() || node.Scalar().empty()) fail("must be a string (got " + shown() + ")");
    return node.Scalar();
  }
  double number(double min, double max) const {
    double v = NAN;
    if (node.IsScalar() && node.Tag() != "!") {
      std::istringstream in(node.Scalar());
      in.imbue(std::locale::classic());
      in >> v;
      if (!in || !in.eof()) v = NAN;
    }
    if (!std::isfinite(v)) fail("must be a number (got " + shown() + ")");
    if (v < min || v > max) {
      std::ostringstream range;
      range << "must be between " << min << " and " << max << " (got " << node.Scalar() << ")";
      fail(range.str());
    }
    return v;
  }
  int integer(int min, int max) const {
    const double v = number(min, max);
    if (v != std::floor(v)) fail("must be a whole number (got " + shown() + ")");
    return int(v);
  }
  bool flag() const {
    bool v = false;
    if (!node.IsScalar() || node.Tag() == "!" || !YAML::convert<bool>::decode(node, v)) {
      fail("must be true or false (got " + shown() + ")");
    }
    return v;
  }
};

int line_of(const YAML::Node& n, int fallback) {
  return n.Mark().is_null() || n.IsNull() ? fallback : n.Mark().line + 1;
}

// The keys of a map, each known to `known` and given once; fields by name.
class Map {
 public:
  Map(const Value& map, const std::vector<std::string>& known) : map_(map) {
    if (!map.node.IsMap()) map.fail("must be a map of keys (got " + map.shown() + ")");
    for (const auto& kv : map.node) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      const std::string key = map.key.empty() ? name : map.key + "." + name;
      const Value v{kv.second, key, line_of(kv.first, map.line), map.file};
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        v.fail("unknown key (known keys: " + list + ")");
      }
      if (!fields_.emplace(name, v).second) v.fail("repeated key");
    }
  }
  const Value* find(const std::string& name) const {
    const auto it = fields_.find(name);
    return it == fields_.end() ? nullptr : &it->second;
  }
  const Value& require(const std::string& name) const {
    if (const Value* v = find(name)) return *v;
    Value{YAML::Node(), map_.key.empty() ? name : map_.key + "." + name, map_.line, map_.file}.fail(
        "required");
  }

 private:
  Value map_;
  std::map<std::string, Value> fields_;
};

std::string absolute_in(const std::string& dir, const std::string& path) {
  return (fs::path(dir) / path).lexically_normal().string();
}

// Strips one trailing '/' that lexically_normal leaves on folders.
std::string folder_path(const std::string& dir, const Value& v) {
  std::string p = absolute_in(dir, v.text());
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

bool is_within(const std::string& path, const std::string& folder) {
  return path == folder ||
         (path.size() > folder.size() && path.compare(0, folder.size(), folder) == 0 &&
          path[folder.size()] == '/');
}

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void parse_listen(const Value& v, HttpSpec& http) {
  const std::string s = v.text();
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    v.fail("must be HOST:PORT such as 127.0.0.1:8611 (got '" + s + "')");
  }
  http.host = s.substr(0, colon);
  if (http.host.front() == '[' && http.host.back() == ']') {
    http.host = http.host.substr(1, http.host.size() - 2);
  }
  const std::string port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) > 65535) {
    v.fail("port must be a number from 0 to 65535 (got '" + port + "')");
  }
  http.port = std::stoi(port);
}

class EntryParser {
 public:
  EntryParser(const Value& v, const std::string& base_dir) : map_(v, kEntryKeys), value_(v) {
    entry_.line = v.line;
    base_dir_ = base_dir;
  }

  WatchEntry parse() {
    const Value& folder = map_.require("folder");
    entry_.folder = folder_path(base_dir_, folder);
    if (!is_folder(entry_.folder)) folder.fail("'" + entry_.folder + "' is not a folder");
    if (const Value* v = map_.find("recursive")) entry_.recursive = v->flag();
    parse_job(map_.require("job"));
    if (const Value* v = map_.find("patterns")) {
      parse_patterns(*v);
    } else {
      // The job is parsed (validate_job) only once its input patterns are known: its task here.
      const YAML::Node task =
          job_node_.IsMap() ? static_cast<const YAML::Node&>(job_node_)["task"] : YAML::Node();
      const bool latents = task && task.IsScalar() && task.Scalar() == "decode_latents";
      entry_.patterns = latents ? std::vector<std::string>{"*.safetensors"} : kVideoPatterns;
    }
    validate_job();
    parse_disposition();
    entry_.settings =
        sched::stable_hash(sched::job_settings_hash(entry_.job) + "\noutput " + entry_.job.output +
                           "\non_exists " + wm::to_string(entry_.job.on_exists));
    return entry_;
  }

 private:
  void parse_patterns(const Value& v) {
    std::vector<Value> items;
    if (v.node.IsScalar()) {
      items.push_back(v);
    } else if (v.node.IsSequence() && v.node.size() > 0) {
      for (const auto& n : v.node) items.push_back({n, v.key, line_of(n, v.line), v.file});
    } else {
      v.fail("must be a pattern such as '*.mp4' or a list of them (got " + v.shown() + ")");
    }
    for (const Value& item : items) {
      const std::string p = item.text();
      if (p.find('/') != std::string::npos) item.fail("matches file names; must not hold '/'");
      entry_.patterns.push_back(p);
    }
  }

  // The job node (inline map, or a job file holding one job), kept for validate_job().
  void parse_job(const Value& v) {
    job_value_ = v;
    if (v.node.IsMap()) {
      const YAML::Node& job = v.node;
      if (job["input"]) {
        Value{job["input"], v.key + ".input", line_of(job["input"], v.line), v.file}.fail(
            "is filled in per file by the daemon; leave it out");
      }
      job_node_ = v.node;  // not a clone: a clone loses the marks that give errors their lines
      job_file_ = *v.file;
      job_name_ = fs::path(entry_.folder).filename().string();
      return;
    }
    job_file_ = absolute_in(base_dir_, v.text());
    std::ifstream in(job_file_, std::ios::binary);
    if (!in || is_folder(job_file_)) v.fail("cannot open job file '" + job_file_ + "'");
    std::vector<YAML::Node> docs;
    try {
      for (const YAML::Node& d : YAML::LoadAll(in)) {
        if (!d.IsNull()) docs.push_back(d);
      }
    } catch (const YAML::Exception& e) {
      throw ConfigError(job_file_, e.mark.is_null() ? 1 : e.mark.line + 1, "",
                        "invalid YAML: " + e.msg);
    }
    if (docs.size() != 1) {
      v.fail("job file '" + job_file_ + "' must hold exactly one job (it has " +
             std::to_string(docs.size()) + ")");
    }
    job_node_ = docs.front();
    job_name_ = fs::path(job_file_).stem().string();
  }

  // Validates the job with the folder's patterns as its input, so that the job parser checks the
  // output template against them ({stem} needed, outputs that the folder would take again).
  void validate_job() {
    if (!job_node_.IsMap())
      job_value_.fail("must be a job (a map) or a job file (got " + job_value_.shown() + ")");
    YAML::Node inputs(YAML::NodeType::Sequence);
    for (const std::string& p : entry_.patterns) inputs.push_back(entry_.folder + "/" + p);
    job_node_["input"] = inputs;
    if (const Value* out = map_.find("output")) {
      out->text();
      // The entry's own key node, so that the job parser's errors name its line.
      job_node_.remove("output");
      for (const auto& kv : value_.node) {
        if (kv.first.Scalar() == "output") job_node_.force_insert(kv.first, kv.second);
      }
    } else if (!static_cast<const YAML::Node&>(job_node_)["output"]) {
      map_.require("output");
    }
    entry_.job = parse_job_node(job_node_, job_file_, job_name_);
    entry_.job.inputs.clear();
    entry_.job.input_lines.clear();
    // Recursive folders take their sub-folders too: an output below the folder that a pattern
    // matches would come back as an input.
    if (entry_.recursive) {
      const std::string sample = expand_output(entry_.job.output, entry_.folder + "/sub/x.mkv",
                                               entry_.job.name, entry_.job.dir);
      const std::string name = fs::path(sample).filename().string();
      for (const std::string& p : entry_.patterns) {
        if (is_within(sample, entry_.folder) && fnmatch(p.c_str(), name.c_str(), 0) == 0) {
          const Value* out = map_.find("output");
          (out ? *out : job_value_)
              .fail("outputs would be written inside the recursive folder and match '" + p +
                    "'; write them to another folder");
        }
      }
    }
  }

  void parse_disposition() {
    if (const Value* v = map_.find("on_done")) {
      const std::string s = v->text();
      if (s == "keep") {
        entry_.on_done = OnDone::kKeep;
      } else if (s == "move") {
        entry_.on_done = OnDone::kMove;
      } else if (s == "delete") {
        entry_.on_done = OnDone::kDelete;
      } else {
        v->fail("must be keep, move or delete (got '" + s + "')");
      }
    }
    const Value* done = map_.find("done_folder");
    if (entry_.on_done == OnDone::kMove && !done) map_.require("done_folder");
    if (done) {
      if (entry_.on_done != OnDone::kMove) done->fail("applies only to on_done: move");
      entry_.done_folder = folder_path(base_dir_, *done);
      if (entry_.done_folder == entry_.folder) done->fail("must not be the watched folder");
    }
    if (const Value* failed = map_.find("failed_folder")) {
      entry_.failed_folder = folder_path(base_dir_, *failed);
      if (entry_.failed_folder == entry_.folder) failed->fail("must not be the watched folder");
    }
  }

  Map map_;
  Value value_;
  WatchEntry entry_;
  std::string base_dir_;
  Value job_value_{};
  YAML::Node job_node_;
  std::string job_file_;
  std::string job_name_;
};

}  // namespace

const char* to_string(OnDone o) {
  switch (o) {
    case OnDone::kMove:
      return "move";
    case OnDone::kDelete:
      return "delete";
    case OnDone::kKeep:
    default:
      return "keep";
  }
}

WatchSpec parse_watch_text(const std::string& text, const std::string& path) {
  WatchSpec spec;
  spec.file = fs::absolute(path).lexically_normal().string();
  const std::string dir = fs::path(spec.file).parent_path().string();
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, e.mark.is_null() ? 1 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  }
  const Value top{root, "", line_of(root, 1), &path};
  if (root.IsNull()) top.fail("no watch configuration in file (it is empty)");
  const Map map(top, kTopKeys);

  spec.queue = absolute_in(dir, fs::path(spec.file).stem().string() + ".wmwatch.sqlite");
  if (const Value* v = map.find("queue")) spec.queue = absolute_in(dir, v->text());
  if (const Value* v = map.find("poll_seconds")) spec.poll_seconds = v->number(0.1, 86400);
  if (const Value* v = map.find("settle_seconds")) spec.settle_seconds = v->number(0, 86400);
  if (const Value* v = map.find("max_parallel")) spec.max_parallel = v->integer(1, 256);
  if (const Value* v = map.find("chunk_frames")) spec.chunk_frames = v->integer(0, 100000000);
  if (const Value* v = map.find("retry")) {
    const Map retry(*v, kRetryKeys);
    if (const Value* r = retry.find("max_attempts")) spec.retry.max_attempts = r->integer(1, 1000);
    if (const Value* r = retry.find("backoff_seconds")) {
      spec.retry.backoff_seconds = r->number(0, 86400);
    }
    if (const Value* r = retry.find("backoff_max_seconds")) {
      spec.retry.backoff_max_seconds = r->number(0, 7 * 86400);
    }
  }
  if (const Value* v = map.find("http")) {
    spec.http.enabled = true;
    if (!v->node.IsNull()) {
      const Map http(*v, kHttpKeys);
      if (const Value* l = http.find("listen")) parse_listen(*l, spec.http);
    }
  }
  const Value& watch = map.require("watch");
  if (!watch.node.IsSequence() || watch.node.size() == 0) {
    watch.fail("must be a list of folders to watch (got " + watch.shown() + ")");
  }
  std::map<std::string, int> folders;
  for (const auto& n : watch.node) {
    const Value item{n, "watch", line_of(n, watch.line), &path};
    spec.entries.push_back(EntryParser(item, dir).parse());
    const WatchEntry& e = spec.entries.back();
    const auto [it, fresh] = folders.emplace(e.folder, e.line);
    if (!fresh) {
      item.fail("folder '" + e.folder + "' is also watched by the entry at line " +
                std::to_string(it->second));
    }
  }
  // A folder watched recursively holds every folder below it: one entry per file.
  for (const WatchEntry& a : spec.entries) {
    for (const WatchEntry& b : spec.entries) {
      if (&a != &b && a.recursive && is_within(b.folder, a.folder)) {
        Value{YAML::Node(), "watch.folder", b.line, &path}.fail(
            "'" + b.folder + "' is inside the recursive folder of the entry at line " +
            std::to_string(a.line));
      }
    }
  }
  return spec;
}

WatchSpec load_watch_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || is_folder(path)) {
    throw Error(
        path + ": cannot open watch file: " + std::strerror(is_folder(path) ? EISDIR : errno),
        kExitNoInput);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_watch_text(text.str(), path);
}

bool is_ignored_name(const std::string& name) {
  const auto ends = [&](const char* tail) {
    const size_t n = std::strlen(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  return name.empty() || name[0] == '.' || ends(".part") || ends(".tmp") || ends(".partial") ||
         ends(".error.txt");
}

const WatchEntry* entry_for(const WatchSpec& spec, const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  const std::string dir = p.parent_path().string();
  if (is_ignored_name(name)) return nullptr;
  for (const WatchEntry& e : spec.entries) {
    if (!(dir == e.folder || (e.recursive && is_within(dir, e.folder)))) continue;
    if ((!e.done_folder.empty() && is_within(path, e.done_folder)) ||
        (!e.failed_folder.empty() && is_within(path, e.failed_folder))) {
      continue;
    }
    // Hidden sub-folders are skipped like hidden files.
    if (dir != e.folder && dir.find("/.", e.folder.size()) != std::string::npos) continue;
    for (const std::string& pattern : e.patterns) {
      if (fnmatch(pattern.c_str(), name.c_str(), FNM_PERIOD) == 0) return &e;
    }
  }
  return nullptr;
}

}  // namespace wm::watch
