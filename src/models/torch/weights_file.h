// The tensors of a checkpoint file as the models read them: a `.safetensors` file, or a released
// `.pth`/`.pt` (torch.save zip) through the restricted pickle reader (src/weights/torch_pickle.h:
// nothing in the file runs) — a bare state dict, one nested under "state_dict", or one bare
// tensor (`torch.save(tensor)`, as pos_emb.pt), named by the file's stem. Both are
// memory-mapped; the tensors point into the mapping.
//
// host_tensor() widens one tensor to a float32 host tensor: F32, F16, BF16, F64 and F8_E4M3 (the
// float8 e4m3fn of the ComfyUI conversions, a plain cast without scales) are read.
//
// Errors name the file: a missing or unreadable file → ModelError(kExitNoInput); a malformed one,
// or a tensor of a .pth that is not stored contiguously → ModelError(kExitDataErr).
// Threading: immutable after construction.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/weights/safetensors.h"
#include "src/weights/torch_pickle.h"

namespace wm::models {

class WeightsFile {
 public:
  explicit WeightsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, io::TensorInfo>& tensors() const { return tensors_; }
  // Null when the file has no such tensor.
  const io::TensorInfo* find(const std::string& name) const;

 private:
  std::string path_;
  std::optional<io::SafetensorsFile> file_;
  std::optional<io::TorchCheckpoint> torch_;
  std::map<std::string, io::TensorInfo> tensors_;
};

// One tensor a model expects in a file.
struct ExpectedTensor {
  std::string key;
  std::vector<int64_t> shape;
  bool required = true;  // false: may be absent, but shaped right when present
};

// Checks `file` against `expected` (in that order): every required key present, every present
// key with its shape and a readable dtype, no key outside the list. Throws ModelError
// (kExitDataErr) on the first problem as one line: "PATH: problem (CONTEXT; N more problems)".
void check_tensors(const WeightsFile& file, const std::vector<ExpectedTensor>& expected,
                   const std::string& context);
// "[a, b, c]"
std::string shape_text(const std::vector<int64_t>& shape);

// True for the dtypes host_tensor() reads.
bool readable_float_dtype(const std::string& dtype);
// The tensor's values as a float32 host tensor of its shape (a copy out of the mapping, which
// need not be aligned). The dtype must be readable (readable_float_dtype).
at::Tensor host_tensor(const io::TensorInfo& info);
// The 256 values of float8 e4m3fn (index = the byte), float32 (NaN for 0x7f and 0xff).
const float* float8_e4m3_values();

}  // namespace wm::models
