// Models by name (catalog.h): the released-names table and the models folder.
#include "src/models/catalog.h"

#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "src/base/error.h"
#include "src/yaml_load.h"

// Set by src/CMakeLists.txt: the source tree's configs/ folder and the install layout's data
// folder below the prefix (share).
#ifndef WM_CONFIGS_SOURCE_DIR
#define WM_CONFIGS_SOURCE_DIR ""
#endif
#ifndef WM_INSTALL_DATADIR
#define WM_INSTALL_DATADIR "share"
#endif

namespace wm {
namespace {

namespace fs = std::filesystem;

const char* const kWeightExtensions[] = {".pth", ".safetensors", ".pt", ".pt2"};
const char* const kPathExtensions[] = {".pth",  ".safetensors", ".pt",  ".pt2",
                                       ".ckpt", ".bin",         ".onnx"};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string self_folder() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  return fs::path(std::string(buf, size_t(n))).parent_path().string();
}

std::mutex g_mutex;
std::string g_models_dir;  // set_models_dir

[[noreturn]] void bad_table(const std::string& path, const YAML::Node& node, const std::string& key,
                            const std::string& problem) {
  const int line = node.Mark().is_null() ? 0 : node.Mark().line + 1;
  throw ConfigError(path, line, key, problem);
}

std::vector<std::string> string_list(const std::string& path, const YAML::Node& node,
                                     const std::string& key) {
  std::vector<std::string> out;
  if (node.IsScalar()) {
    out.push_back(node.Scalar());
  } else if (node.IsSequence()) {
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) bad_table(path, item, key, "must be a list of strings");
      out.push_back(item.Scalar());
    }
  } else {
    bad_table(path, node, key, "must be a string or a list of strings");
  }
  return out;
}

}  // namespace

const ReleasedModel* ModelCatalog::find(const std::string& name) const {
  for (const ReleasedModel& m : models) {
    if (m.name == name) return &m;
  }
  for (const ReleasedModel& m : models) {
    if (lower(m.name) == lower(name)) return &m;
  }
  return nullptr;
}

const ReleasedModel* ModelCatalog::find_file(const std::string& file_name) const {
  for (const ReleasedModel& m : models) {
    if (std::find(m.files.begin(), m.files.end(), file_name) != m.files.end()) return &m;
  }
  return nullptr;
}

ModelCatalog read_catalog(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, "", "cannot read the table of released models");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<YAML::Node> docs;
  try {
    docs = load_yaml_documents(text.str());
  } catch (const YAML::Exception& e) {
    throw ConfigError(path, e.mark.is_null() ? 0 : e.mark.line + 1, "", "invalid YAML: " + e.msg);
  }
  ModelCatalog catalog;
  catalog.path = path;
  if (docs.empty() || docs.front().IsNull()) return catalog;
  const YAML::Node& root = docs.front();
  if (!root.IsMap()) bad_table(path, root, "", "must be a map of model names");
  for (const auto& kv : root) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (name.empty()) bad_table(path, kv.first, "", "model names must be words");
    const YAML::Node& entry = kv.second;
    if (!entry.IsMap()) bad_table(path, entry, name, "must be a map (kind, scale, files, ...)");
    ReleasedModel m;
    m.name = name;
    for (const auto& field : entry) {
      const std::string key = field.first.Scalar();
      const YAML::Node& value = field.second;
      const std::string where = name + "." + key;
      if (key == "files" || key == "sha256") {
        (key == "files" ? m.files : m.sha256) = string_list(path, value, where);
        continue;
      }
      if (!value.IsScalar()) bad_table(path, value, where, "must be a scalar");
      if (key == "kind") {
        m.kind = value.Scalar();
      } else if (key == "scale") {
        try {
          m.scale = std::stoi(value.Scalar());
        } catch (const std::exception&) {
          bad_table(path, value, where, "must be an integer");
        }
      } else if (key == "task") {
        m.task = value.Scalar();
      } else if (key == "source") {
        m.source = value.Scalar();
      } else if (key == "license") {
        m.license = value.Scalar();
      } else if (key == "note") {
        m.note = value.Scalar();
      } else {
        bad_table(path, field.first, where, "unknown key");
      }
    }
    if (m.kind.empty()) bad_table(path, entry, name + ".kind", "required");
    if (m.files.empty()) bad_table(path, entry, name + ".files", "required");
    if (!m.sha256.empty() && m.sha256.size() != m.files.size()) {
      bad_table(path, entry, name + ".sha256", "needs one entry per file");
    }
    m.sha256.resize(m.files.size());
    catalog.models.push_back(std::move(m));
  }
  return catalog;
}

std::vector<std::string> table_candidates() {
  std::vector<std::string> out;
  const std::string self = self_folder();
  if (!self.empty()) {
    out.push_back((fs::path(self) / ".." / WM_INSTALL_DATADIR / "wmbatch" / "models.yaml")
                      .lexically_normal()
                      .string());
  }
  if (std::string(WM_CONFIGS_SOURCE_DIR).size() > 0) {
    out.push_back(std::string(WM_CONFIGS_SOURCE_DIR) + "/models.yaml");
  }
  return out;
}

const ModelCatalog& model_catalog() {
  static const ModelCatalog catalog = [] {
    for (const std::string& path : table_candidates()) {
      if (is_file(path)) return read_catalog(path);
    }
    return ModelCatalog{};
  }();
  return catalog;
}

void set_models_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_models_dir = dir.empty() ? dir : fs::absolute(dir).lexically_normal().string();
}

ModelsFolder models_folder() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_models_dir.empty()) return {g_models_dir, "--models-dir"};
  }
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (const std::string v = env("WMBATCH_MODELS"); !v.empty()) {
    return {fs::absolute(v).lexically_normal().string(), "WMBATCH_MODELS"};
  }
  // XDG: a relative XDG_DATA_HOME is invalid and ignored.
  if (const std::string v = env("XDG_DATA_HOME"); !v.empty() && v.front() == '/') {
    return {(fs::path(v) / "wmbatch" / "models").lexically_normal().string(), "XDG_DATA_HOME"};
  }
  const std::string home = env("HOME");
  return {(fs::path(home.empty() ? "/" : home) / ".local/share/wmbatch/models").string(), "HOME"};
}

bool is_model_name(const std::string& value) {
  if (value.empty() || value.find('/') != std::string::npos) return false;
  const std::string low = lower(value);
  for (const char* ext : kPathExtensions) {
    if (ends_with(low, ext)) return false;
  }
  return true;
}

std::string kind_of_weights(const std::string& path) {
  const std::string file = fs::path(path).filename().string();
  if (const ReleasedModel* m = model_catalog().find_file(file)) return m->kind;
  const std::string low = lower(file);
  if (ends_with(low, ".pt2")) return "aoti";
  if (ends_with(low, ".pt")) return "torchscript";
  if (ends_with(low, ".pth")) return "realesrgan";
  return "";
}

std::vector<ModelFile> list_models(const std::string& folder) {
  std::vector<ModelFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string file = e.path().filename().string();
    if (file.empty() || file[0] == '.') continue;
    std::error_code type_ec;
    if (!e.is_regular_file(type_ec)) continue;
    const std::string low = lower(file);
    std::string ext;
    for (const char* x : kWeightExtensions) {
      if (ends_with(low, x)) ext = x;
    }
    if (ext.empty()) continue;
    ModelFile m;
    m.file = file;
    m.name = file.substr(0, file.size() - ext.size());
    m.path = e.path().string();
    m.size = int64_t(e.file_size(type_ec));
    m.released = model_catalog().find_file(file);
    m.kind = kind_of_weights(file);
    if (m.released) {
      m.name = m.released->name;
      m.scale = m.released->scale;
    }
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(),
            [](const ModelFile& a, const ModelFile& b) { return a.file < b.file; });
  return out;
}

FoundModel find_model(const std::string& name) {
  const ModelsFolder folder = models_folder();
  const ReleasedModel* released = model_catalog().find(name);
  std::vector<std::string> tried;
  for (const char* ext : kWeightExtensions) tried.push_back(name + ext);
  if (released) {
    for (const std::string& f : released->files) {
      if (std::find(tried.begin(), tried.end(), f) == tried.end()) tried.push_back(f);
    }
  }
  for (const std::string& file : tried) {
    const std::string path = (fs::path(folder.path) / file).string();
    if (is_file(path)) {
      FoundModel found;
      found.path = path;
      found.released = released ? released : model_catalog().find_file(file);
      found.kind = found.released ? found.released->kind : kind_of_weights(file);
      return found;
    }
  }
  std::string names;
  for (const std::string& t : tried) names += (names.empty() ? "" : ", ") + t;
  std::string there;
  for (const ModelFile& m : list_models(folder.path)) there += (there.empty() ? "" : ", ") + m.file;
  std::error_code ec;
  if (!fs::is_directory(folder.path, ec)) {
    there = "the folder does not exist";
  } else if (there.empty()) {
    there = "it holds no model files";
  } else {
    there = "it holds " + there;
  }
  std::string message =
      "model '" + name + "': none of " + names + " in " + folder.path + " (" +
      (folder.from == "HOME" ? std::string("the default models folder") : "from " + folder.from) +
      "; " + there + ")";
  if (released) {
    message +=
        "; get " + released->files.front() + " from " + released->source + " into " + folder.path;
  } else {
    std::string known;
    for (const ReleasedModel& m : model_catalog().models) {
      known += (known.empty() ? "" : ", ") + m.name;
    }
    message += known.empty() ? "; give a path, or --models-dir"
                             : "; released names: " + known + " (`wmbatch models` lists them)";
  }
  throw Error(message, kExitNoInput);
}

}  // namespace wm
