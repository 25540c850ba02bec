// PyTorch checkpoints (`torch.save`, zip format, PyTorch >= 1.6) read without PyTorch and without
// running anything the file says: a zip of `<stem>/data.pkl` (a pickle), `<stem>/data/<key>` (raw
// little-endian storages, stored uncompressed) and small entries such as `<stem>/version`.
//
// The pickle is run by a restricted interpreter that knows only what a dict of tensors (or one
// bare tensor) needs:
// dicts (plain and `collections.OrderedDict`, nested: `{'params_ema': OrderedDict(...)}`), lists,
// tuples, strings, numbers, booleans, None, the persistent ids of storages, the globals
// `collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`, `torch._utils._rebuild_parameter`
// and `torch.<Dtype>Storage`, and the opcodes that build them (protocols 2 to 5). Any other global
// (`os.system`, `builtins.eval`, ...), any call of something else, and any other opcode are
// refused before they could matter: a model file never runs code.
//
// Like SafetensorsFile, TorchCheckpoint memory-maps the file and hands out pointers into it; no
// Torch here, the models wrap the bytes themselves.
//
// Bounded, whatever the file holds: data.pkl at most 64 MiB; containers nested at most 100 deep
// (a state dict has a few levels; a chain of 2 million tuples once crashed the reader when
// freed); at most 2^22 values made, 2^20 on the stack, and 2^20 entries in the top-level dict's
// dicts together (one dict may be shared by many keys); a container may not change after it
// was put into another (no recursive structures). Time is linear in data.pkl (dict keys hashed;
// a dict of 300 000 entries once took quadratic time). Only regular files are opened, without
// waiting on a FIFO.
//
// Errors: a missing or unreadable file, or one that is not a regular file (a FIFO, a folder) →
// InputError(kExitNoInput); anything else (not a zip, truncated, compressed entries, a refused
// global or opcode, storages out of range, a bound above) → ModelError(kExitDataErr)
// "PATH: <what>", one line that quotes at most ~160 bytes of any name. Never reads out of bounds.
// Threading: immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/weights/mapped_file.h"

namespace wm::io {

struct TorchTensor {
  std::string dtype;             // safetensors names: "F32", "F16", "BF16", "F64", "I64", ...
  std::vector<int64_t> shape;    // empty for a scalar
  std::vector<int64_t> strides;  // in elements, as saved (state dicts are usually contiguous)
  // The element at index 0 (storage offset applied); every element the shape and strides reach
  // lies inside the storage (checked). Not necessarily aligned.
  const void* data = nullptr;
  size_t element_size = 0;
  bool contiguous() const;
};

class TorchCheckpoint {
 public:
  explicit TorchCheckpoint(const std::string& path);
  TorchCheckpoint(TorchCheckpoint&& other) = default;
  TorchCheckpoint& operator=(TorchCheckpoint&& other) = default;

  const std::string& path() const { return path_; }
  // Tensors of the top-level dict, by key ("body.0.weight" in a bare state dict).
  const std::map<std::string, TorchTensor>& tensors() const { return tensors_; }
  // Tensors of the nested dict under the top-level key `key` ("params", "params_ema"); empty when
  // there is no such dict. Deeper levels are not kept.
  const std::map<std::string, TorchTensor>& dict(const std::string& key) const;
  // Every top-level key, sorted, with what it holds ("tensor", "dict", "int", "str", ...).
  const std::map<std::string, std::string>& top_level() const { return top_level_; }
  // The tensor a file of one bare tensor holds (`torch.save(tensor)`, as SeedVR2's pos_emb.pt);
  // null for a dict (then tensors() and dict() hold what it has).
  const TorchTensor* root_tensor() const { return has_root_ ? &root_ : nullptr; }

 private:
  std::string path_;
  MappedFile file_;
  std::map<std::string, TorchTensor> tensors_;
  std::map<std::string, std::map<std::string, TorchTensor>> dicts_;
  std::map<std::string, std::string> top_level_;
  TorchTensor root_;
  bool has_root_ = false;
};

}  // namespace wm::io
