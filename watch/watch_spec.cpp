// WATCH.yaml → WatchSpec. Each key is checked in the order of WatchSpec's fields; jobs are
// checked by the job file parser itself (parse_job_node), with the folder's patterns as input.
#include "watch/watch_spec.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "scheduler/fingerprint.h"
#include "scheduler/journal.h"
#include "src/base/error.h"
#include "src/yaml_load.h"

namespace wm::watch {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopKeys = {"queue",        "poll_seconds", "settle_seconds",
                                           "max_parallel", "chunk_frames", "retry",
                                           "http",         "watch"};
const std::vector<std::string> kEntryKeys = {"folder",      "recursive",     "patterns",
                                             "job",         "output",        "on_done",
                                             "done_folder", "failed_folder", "follow_symlinks"};
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
  // Numbers, integers and flags read as job files read them (src/yaml_load.h).
  double number(double min, double max) const {
    const std::optional<double> v = yaml_number(node);
    if (!v) fail("must be a number (got " + shown() + ")");
    check_range(*v, min, max);
    return *v;
  }
  int integer(int min, int max) const {
    const std::optional<long long> v = yaml_integer(node);
    if (!v) fail("must be an integer (got " + shown() + ")");
    check_range(double(*v), min, max);
    return int(*v);
  }
  bool flag() const {
    const std::optional<bool> v = yaml_flag(node);
    if (!v) fail("must be true or false (got " + shown() + ")");
    return *v;
  }
  void check_range(double v, double min, double max) const {
    if (v >= min && v <= max) return;
    std::ostringstream range;
    range.imbue(std::locale::classic());
    range << "must be between " << min << " and " << max << " (got " << node.Scalar() << ")";
    fail(range.str());
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

// `text` with its braces doubled: literal text inside an output template.
std::string braces_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

// `tmpl` with the placeholders named in `values` replaced by their values (`{{`, `}}` and every
// other placeholder kept as written), and the names of every placeholder it holds in `used`.
std::string substitute(const std::string& tmpl, const std::map<std::string, std::string>& values,
                       std::set<std::string>* used = nullptr) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if ((c == '{' || c == '}') && i + 1 < tmpl.size() && tmpl[i + 1] == c) {
      out += tmpl.substr(i, 2);
      ++i;
      continue;
    }
    const size_t close = c == '{' ? tmpl.find('}', i + 1) : std::string::npos;
    if (close == std::string::npos) {
      out += c;
      continue;
    }
    const std::string name = tmpl.substr(i + 1, close - i - 1);
    if (used) used->insert(name);
    const auto it = values.find(name);
    out += it == values.end() ? tmpl.substr(i, close + 1 - i) : it->second;
    i = close;
  }
  return out;
}

// The path with its symbolic links resolved, as far as it exists (the rest appended as written).
std::string real_path(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.lexically_normal().string();
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

// A file name that fnmatch `pattern` takes ("*.mp4" → "x.mp4"), or "" when none is found.
std::string sample_name(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '*' || c == '?') {
      out += 'x';
    } else if (c == '\\' && i + 1 < pattern.size()) {
      out += pattern[++i];
    } else if (c == '[') {
      // A member of the bracket expression (']' right after '[' or '[!' is one).
      size_t close = i + 1;
      if (close < pattern.size() && (pattern[close] == '!' || pattern[close] == '^')) ++close;
      if (close < pattern.size() && pattern[close] == ']') ++close;
      close = pattern.find(']', close);
      if (close == std::string::npos) {
        out += c;
        continue;
      }
      const std::string bracket = pattern.substr(i, close + 1 - i);
      for (const char member : std::string("x0aA_-.")) {
        if (fnmatch(bracket.c_str(), std::string(1, member).c_str(), 0) == 0) {
          out += member;
          break;
        }
      }
      i = close;
    } else {
      out += c;
    }
  }
  return fnmatch(pattern.c_str(), out.c_str(), FNM_PERIOD) == 0 ? out : "";
}

// Refuses outputs that come back as inputs: an entry whose outputs its own folder takes (a_x2 →
// a_x2_x2 → ...), or entries that feed each other round. A chain that ends (in/ → mid/, mid/ →
// out/) is fine. Where each entry's outputs go is found by expanding its template for a sample
// file of each pattern (at the folder's top and, when recursive, in a sub-folder), compared with
// symbolic links resolved.
void check_output_loops(const WatchSpec& spec, const std::string& path) {
  WatchSpec real = spec;
  for (WatchEntry& e : real.entries) {
    e.folder = e.real_folder;
    if (!e.done_folder.empty()) e.done_folder = real_path(e.done_folder);
    if (!e.failed_folder.empty()) e.failed_folder = real_path(e.failed_folder);
  }
  const size_t n = spec.entries.size();
  // feeds[a][b]: an output of entry a that entry b would take ("" when none).
  std::vector<std::vector<std::string>> feeds(n, std::vector<std::string>(n));
  for (size_t a = 0; a < n; ++a) {
    const WatchEntry& e = spec.entries[a];
    for (const std::string& pattern : e.patterns) {
      const std::string name = sample_name(pattern);
      if (name.empty()) continue;
      std::vector<std::string> samples = {e.folder + "/" + name};
      if (e.recursive) samples.push_back(e.folder + "/wmbatch-sample/" + name);
      for (const std::string& input : samples) {
        std::string out;
        try {
          out = output_for(e, input);
        } catch (const Error&) {
          continue;  // the output would be the input: the job parser refused such templates
        }
        const WatchEntry* taker = entry_for(real, real_path(out));
        if (!taker) continue;
        const size_t b = size_t(taker - real.entries.data());
        if (feeds[a][b].empty()) feeds[a][b] = out;
      }
    }
  }
  // The first entry (in file order) on a cycle, found by a walk from each entry.
  for (size_t start = 0; start < n; ++start) {
    std::vector<size_t> from(n, n);  // how each entry was reached
    std::vector<size_t> todo = {start};
    std::vector<bool> seen(n, false);
    while (!todo.empty()) {
      const size_t a = todo.back();
      todo.pop_back();
      for (size_t b = 0; b < n; ++b) {
        if (feeds[a][b].empty()) continue;
        if (b == start) {
          const WatchEntry& e = spec.entries[start];
          const Value where{YAML::Node(), "watch.output", e.output_line, &path};
          if (a == start) {
            where.fail("its outputs would be taken again by this entry ('" + feeds[a][b] +
                       "' is in its folder and matches its patterns), and theirs again, without "
                       "end; write them to a folder it does not watch");
          }
          // The entry this one feeds, on the way round.
          size_t next = a;
          while (from[next] != start) next = from[next];
          where.fail("its outputs go to the folder of the entry at line " +
                     std::to_string(spec.entries[next].line) + " ('" + feeds[start][next] +
                     "'), whose outputs come back here: files would be processed round and "
                     "round; let one of them write outside the other's folders");
        }
        if (!seen[b]) {
          seen[b] = true;
          from[b] = a;
          todo.push_back(b);
        }
      }
    }
  }
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
    entry_.real_folder = real_path(entry_.folder);
    if (const Value* v = map_.find("recursive")) entry_.recursive = v->flag();
    if (const Value* v = map_.find("follow_symlinks")) parse_follow_symlinks(*v);
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
        sched::stable_hash(sched::stable_hash(sched::job_settings_text(entry_.job)) + "\noutput " +
                           entry_.output + "\non_exists " + wm::to_string(entry_.job.on_exists));
    return entry_;
  }

 private:
  void parse_follow_symlinks(const Value& v) {
    bool on = false;
    if (v.node.IsScalar() && v.node.Scalar() == "outside") {
      entry_.follow_symlinks = FollowSymlinks::kOutside;
    } else if (v.node.IsScalar() && v.node.Tag() != "!" &&
               YAML::convert<bool>::decode(v.node, on)) {
      entry_.follow_symlinks = on ? FollowSymlinks::kInside : FollowSymlinks::kNo;
    } else {
      v.fail("must be false, true (links to files inside the folder) or outside (got " + v.shown() +
             ")");
    }
  }

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
    std::ostringstream text;
    text << in.rdbuf();
    std::vector<YAML::Node> docs;
    try {
      for (const YAML::Node& d : load_yaml_documents(text.str())) {
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
    // The job's node may be another entry's too (a YAML alias, `job: *upscale`): the keys set
    // here for validation are put back as they were once it is parsed, however it ends.
    struct Restore {
      YAML::Node node;
      std::vector<std::pair<YAML::Node, YAML::Node>> saved;
      ~Restore() {
        node.remove("input");
        node.remove("output");
        for (const auto& [key, value] : saved) node.force_insert(key, value);
      }
    } restore{job_node_, {}};
    for (const auto& kv : job_node_) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (key == "input" || key == "output") restore.saved.emplace_back(kv.first, kv.second);
    }
    YAML::Node inputs(YAML::NodeType::Sequence);
    for (const std::string& p : entry_.patterns) inputs.push_back(entry_.folder + "/" + p);
    job_node_.remove("input");  // a new node: assigning would change the one `restore` keeps
    job_node_["input"] = inputs;
    // The template: the entry's `output` (its own key node, so that the job parser's errors name
    // its line), else the job's.
    std::optional<std::pair<YAML::Node, YAML::Node>> output;
    if (const Value* out = map_.find("output")) {
      out->text();
      for (const auto& kv : value_.node) {
        if (kv.first.Scalar() == "output") output.emplace(kv.first, kv.second);
      }
      entry_.output_line = out->line;
    } else {
      for (const auto& saved : restore.saved) {
        if (saved.first.Scalar() == "output") output.emplace(saved.first, saved.second);
      }
      if (!output) map_.require("output");
      entry_.output_line = value_.line;
    }
    // {subdir} is the daemon's own: the job parser checks the template without it. (A new node:
    // assigning to a YAML::Node would change the document's.)
    // An entry's own relative template resolves against WATCH.yaml's folder, a job file's against
    // the job file's (where each was written); the job parser sees it absolute.
    const bool own_output = map_.find("output") != nullptr;
    std::set<std::string> used;
    YAML::Node value = output->second;
    if (value.IsScalar()) {
      entry_.output = value.Scalar();
      std::string checked = substitute(entry_.output, {{"subdir", ""}}, &used);
      if (own_output && !checked.empty() && checked[0] != '/' && checked.rfind("{dir}", 0) != 0) {
        checked = braces_escaped(base_dir_) + "/" + checked;
      }
      if (checked != entry_.output) value.reset(YAML::Node(checked));
    }
    job_node_.remove("output");
    job_node_.force_insert(output->first, value);
    entry_.job = parse_job_node(job_node_, job_file_, job_name_);
    entry_.output_dir = own_output ? base_dir_ : entry_.job.dir;
    entry_.job.inputs.clear();
    entry_.job.input_lines.clear();
    // Files of every sub-folder, one template: two files of one name (cam1/clip.mp4,
    // cam2/clip.mp4) would write one output, the second over the first.
    if (entry_.recursive && !used.count("subdir") && !used.count("dir")) {
      const Value* out = map_.find("output");
      (out ? *out : job_value_)
          .fail(
              "a recursive entry's output must keep the file's sub-folder, or files of one "
              "name in two sub-folders write one output: put {subdir} (the file's folder below "
              "the watched folder) or {dir} in it, e.g. out/{subdir}/{stem}_x2.mp4");
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
  std::vector<YAML::Node> docs;
  try {
    docs = load_yaml_documents(text);  // not YAML::Load: yaml-cpp 0.7 loops on a stray ','
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, e.mark.is_null() ? 1 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  }
  if (!docs.empty()) root = docs.front();
  const Value top{root, "", line_of(root, 1), &path};
  if (root.IsNull()) top.fail("no watch configuration in file (it is empty)");
  if (docs.size() > 1) {
    Value{docs[1], "", line_of(docs[1], 1), &path}.fail(
        "a second YAML document: a watch file holds one configuration");
  }
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
  check_output_loops(spec, path);
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

std::string output_for(const WatchEntry& entry, const std::string& input) {
  const fs::path file(input);
  std::string subdir = file.parent_path().lexically_relative(entry.folder).string();
  if (subdir == "." || subdir.compare(0, 2, "..") == 0) subdir.clear();
  // {stem} as it is: expand_output would read "pct%03d" as an image sequence's "pct".
  const std::string tmpl = substitute(entry.output, {{"stem", braces_escaped(file.stem().string())},
                                                     {"subdir", braces_escaped(subdir)}});
  return fs::path(expand_output(tmpl, input, entry.job.name, entry.output_dir))
      .lexically_normal()
      .string();
}

bool source_allowed(const WatchEntry& entry, const std::string& path, std::string* why) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) return true;  // gone (or unreadable): the caller finds out on its own
  const std::string real = resolved;
  ::free(resolved);
  // No symbolic link on the way below the watched folder.
  const std::string relative = fs::path(path).lexically_relative(entry.folder).string();
  if (!relative.empty() && relative.compare(0, 2, "..") != 0 &&
      real == (fs::path(entry.real_folder) / relative).lexically_normal().string()) {
    return true;
  }
  std::string problem;
  switch (entry.follow_symlinks) {
    case FollowSymlinks::kOutside:
      return true;
    case FollowSymlinks::kInside:
      if (is_within(real, entry.real_folder)) return true;
      problem = "a symbolic link to '" + real +
                "', outside the watched folder (follow_symlinks: outside would take it)";
      break;
    case FollowSymlinks::kNo:
    default:
      problem = "a symbolic link (to '" + real + "'); follow_symlinks is off";
  }
  if (why) *why = problem;
  return false;
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
