// Safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// optional "__metadata__": {string: string}}), then the data area the offsets point into.
//
// SafetensorsFile memory-maps a file read-only and validates the whole header up front, so every
// TensorInfo it hands out points at `bytes` readable bytes inside the mapping. No Torch here: the
// models wrap the bytes themselves.
//
// Errors: a missing or unreadable file → InputError(kExitNoInput); anything malformed →
// InputError(kExitDataErr) "PATH: malformed safetensors: <what>". Never reads out of bounds.
// Threading: a SafetensorsFile is immutable after construction; concurrent readers are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/weights/mapped_file.h"

namespace wm::io {

// Bytes per element of a safetensors dtype ("F32" → 4), or 0 when the dtype is unknown.
size_t safetensors_dtype_size(const std::string& dtype);

struct TensorInfo {
  std::string dtype;           // "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", ...
  std::vector<int64_t> shape;  // empty for a scalar
  const void* data = nullptr;  // inside the mapping; valid while the SafetensorsFile lives.
                               // Not necessarily aligned to the element size.
  size_t bytes = 0;            // == product(shape) * dtype size
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(SafetensorsFile&& other) = default;
  SafetensorsFile& operator=(SafetensorsFile&& other) = default;

  const std::string& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InputError(kExitDataErr) "PATH: no tensor 'NAME'" when absent.
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The metadata value `key` read as a number from `min` (exclusive when `min_exclusive`) to
  // `max`, a whole one when `whole`; nullopt when the file has no such key. Anything else ("abc",
  // "nan", "0" where 0 is out of range) throws InputError(kExitDataErr): "PATH: metadata KEY
  // 'VALUE' is not ...": a latent file's "fps" and "frames" say how to decode it.
  std::optional<double> metadata_number(const std::string& key, double min, double max,
                                        bool whole = false, bool min_exclusive = false) const;

 private:
  std::string path_;
  MappedFile file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write. `data` must hold `bytes` == product(shape) * dtype size bytes.
struct TensorEntry {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes a safetensors file atomically: the per-process temp name (fs::temp_path_for), fsync,
// `before_rename(temp)` when given (a journal entry), rename to PATH; the temp is removed on any
// failure. The data follow the entries' order; the header is padded with spaces so the data area
// starts 8-byte aligned. Throws InputError(kExitDataErr) for invalid entries (unknown dtype, size
// mismatch, duplicate or empty name, name "__metadata__") and OutputError when the file cannot be
// created or written. Metadata values that are not valid UTF-8 (the "source" path of an input
// named in Latin-1) are written with U+FFFD for their bad bytes: JSON readers of safetensors
// (serde_json in Python's) refuse raw bytes and lone-surrogate escapes alike.
void write_safetensors(const std::string& path, const std::vector<TensorEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::function<void(const std::string&)>& before_rename = {});

}  // namespace wm::io
