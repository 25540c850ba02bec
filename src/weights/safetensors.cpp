#include "src/weights/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "src/base/clip_text.h"
#include "src/base/error.h"
#include "src/base/fs.h"

namespace wm::io {

namespace {

using nlohmann::json;

// The safetensors reference reader refuses headers above 100 MB; so do we (a corrupt length
// field must not make us parse gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// `what` may quote the header (tensor names, dtypes, metadata keys): one printable line.
[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw InputError(path + ": malformed safetensors: " + wm::one_line(what), kExitDataErr);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// product(shape) * elem_size, or false on overflow.
bool byte_count(const std::vector<int64_t>& shape, size_t elem_size, size_t* out) {
  size_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, size_t(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Closes an fd on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  file_ = MappedFile(path);
  const uint64_t file_size = file_.size();
  if (file_size < 8)
    malformed(path, "file has " + std::to_string(file_size) +
                        " bytes, less than the 8-byte header length");
  const unsigned char* bytes = file_.data();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8) {
    malformed(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                        std::to_string(file_size) + " bytes)");
  }
  if (header_len > kMaxHeaderBytes) {
    malformed(path, "header length " + std::to_string(header_len) + " exceeds 100 MiB");
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  json root;
  try {
    root = json::parse(header, header + header_len);
  } catch (const json::exception& e) {
    // The parser quotes header bytes, control characters included (malformed() escapes them).
    malformed(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) malformed(path, "header is not a JSON object");

  const uint64_t data_size = file_size - 8 - header_len;
  const unsigned char* data = bytes + 8 + header_len;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) malformed(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          malformed(path, "__metadata__." + clip(m.key()) + " is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + clip(name) + "': ";
    if (!v.is_object()) malformed(path, where + "entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) malformed(path, where + "missing string 'dtype'");
    if (sh == v.end() || !sh->is_array()) malformed(path, where + "missing array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      malformed(path, where + "missing 'data_offsets' [begin, end]");

    TensorInfo info;
    info.dtype = dt->get<std::string>();
    const size_t elem = safetensors_dtype_size(info.dtype);
    if (elem == 0) malformed(path, where + "unknown dtype '" + clip(info.dtype) + "'");
    for (const json& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        malformed(path, where + "shape entries must be non-negative integers");
      info.shape.push_back(d.get<int64_t>());
    }
    for (const json& o : *off) {
      if (!o.is_number_unsigned())
        malformed(path, where + "data_offsets must be non-negative integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end) malformed(path, where + "data_offsets begin > end");
    if (end > data_size) {
      malformed(path, where + "data_offsets [" + std::to_string(begin) + ", " +
                          std::to_string(end) + "] past the end of the data area (" +
                          std::to_string(data_size) + " bytes)");
    }
    size_t expected = 0;
    if (!byte_count(info.shape, elem, &expected)) malformed(path, where + "shape too large");
    if (expected != end - begin) {
      malformed(path, where + info.dtype + " " + shape_string(info.shape) + " needs " +
                          std::to_string(expected) + " bytes, data_offsets span " +
                          std::to_string(end - begin));
    }
    info.data = data + begin;
    info.bytes = size_t(end - begin);
    tensors_.emplace(name, std::move(info));
  }
  // No two tensors may share bytes: a write through one would change the other, and the
  // reference reader refuses such files too.
  std::vector<std::pair<const unsigned char*, const std::string*>> starts;
  for (const auto& [name, info] : tensors_) {
    if (info.bytes) starts.emplace_back(static_cast<const unsigned char*>(info.data), &name);
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    const TensorInfo& prev = tensors_.at(*starts[i - 1].second);
    const size_t prev_begin = size_t(static_cast<const unsigned char*>(prev.data) - data);
    if (starts[i].first < data + prev_begin + prev.bytes) {
      const TensorInfo& next = tensors_.at(*starts[i].second);
      const size_t next_begin = size_t(starts[i].first - data);
      malformed(path, "tensors '" + clip(*starts[i - 1].second) + "' [" +
                          std::to_string(prev_begin) + ", " +
                          std::to_string(prev_begin + prev.bytes) + "] and '" +
                          clip(*starts[i].second) + "' [" + std::to_string(next_begin) + ", " +
                          std::to_string(next_begin + next.bytes) +
                          "] share bytes (data_offsets overlap)");
    }
  }
}

std::optional<double> SafetensorsFile::metadata_number(const std::string& key, double min,
                                                       double max, bool whole,
                                                       bool min_exclusive) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() || std::isspace(static_cast<unsigned char>(text[0]))
                       ? std::nan("")
                       : std::strtod(text.c_str(), &end);
  const bool number = end && *end == '\0' && errno == 0 && std::isfinite(v);
  if (!number || (min_exclusive ? v <= min : v < min) || v > max || (whole && v != std::floor(v))) {
    auto format = [](double x) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.15g", x);
      return std::string(buf);
    };
    throw InputError(path_ + ": metadata " + one_line(clip(key)) + " '" + one_line(clip(text, 40)) +
                         "' is not " + (whole ? "a whole number" : "a number") + " " +
                         (min_exclusive ? "above " : "from ") + format(min) + " to " + format(max),
                     kExitDataErr);
  }
  return v;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw InputError(path_ + ": no tensor '" + name + "'", kExitDataErr);
  return it->second;
}

void write_safetensors(const std::string& path, const std::vector<TensorEntry>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(const std::string&)>& before_rename) {
  json header = json::object();
  if (!metadata.empty()) {
    json meta = json::object();
    for (const auto& kv : metadata) meta[kv.first] = kv.second;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "': ";
    if (t.name.empty() || t.name == "__metadata__") throw InputError(where + "invalid name");
    if (header.contains(t.name)) throw InputError(where + "duplicate name");
    const size_t elem = safetensors_dtype_size(t.dtype);
    if (elem == 0) throw InputError(where + "unknown dtype '" + t.dtype + "'");
    size_t expected = 0;
    if (!byte_count(t.shape, elem, &expected) || expected != t.bytes) {
      throw InputError(where + t.dtype + " " + shape_string(t.shape) + " does not match " +
                       std::to_string(t.bytes) + " bytes");
    }
    if (t.bytes && !t.data) throw InputError(where + "no data");
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  // Metadata may quote a path that is not UTF-8 ("source"): its bad bytes become U+FFFD, as every
  // safetensors reader (serde_json in Python's) refuses both raw bytes and lone surrogates.
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // data area starts 8-byte aligned
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i)
    len_bytes[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  const std::string partial = fs::temp_path_for(path);
  FdCloser fd{fs::create_exclusive(partial)};  // never through a name someone else made
  if (fd.fd < 0) throw OutputError(partial + ": cannot create: " + errno_text(), kExitCantCreat);
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd.fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const std::string why = errno_text();
        ::unlink(partial.c_str());
        throw OutputError(partial + ": write failed: " + why);
      }
      c += w;
      n -= size_t(w);
    }
  };
  write_all(len_bytes, 8);
  write_all(text.data(), text.size());
  for (const TensorEntry& t : tensors) write_all(t.data, t.bytes);
  if (::fsync(fd.fd) != 0) {
    const std::string why = errno_text();
    ::unlink(partial.c_str());
    throw OutputError(partial + ": fsync failed: " + why);
  }
  ::close(fd.fd);
  fd.fd = -1;
  try {
    if (before_rename) before_rename(partial);
  } catch (...) {
    ::unlink(partial.c_str());
    throw;
  }
  if (::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(partial.c_str());
    throw OutputError(path + ": rename failed: " + why);
  }
}

}  // namespace wm::io
