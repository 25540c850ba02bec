#include "src/models/torch/weights_file.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "src/base/error.h"

namespace wm::models {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

at::ScalarType torch_dtype(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F64") return at::kDouble;
  return at::ScalarType::Undefined;
}

}  // namespace

WeightsFile::WeightsFile(const std::string& path) : path_(path) {
  try {
    if (ends_with(path, ".pth") || ends_with(path, ".pt")) {
      torch_.emplace(path);
      const std::map<std::string, io::TorchTensor>* dict = &torch_->tensors();
      if (dict->empty()) dict = &torch_->dict("state_dict");
      // A file of one bare tensor: that tensor, named by the file's stem ("pos_emb").
      std::map<std::string, io::TorchTensor> bare;
      if (const io::TorchTensor* root = torch_->root_tensor()) {
        bare.emplace(std::filesystem::path(path).stem().string(), *root);
        dict = &bare;
      }
      for (const auto& [name, t] : *dict) {
        if (!t.contiguous()) {
          throw ModelError(path + ": tensor " + name + " is not stored contiguously");
        }
        size_t n = 1;
        for (int64_t d : t.shape) n *= size_t(d);
        io::TensorInfo info;
        info.dtype = t.dtype;
        info.shape = t.shape;
        info.data = t.data;
        info.bytes = n * t.element_size;
        tensors_.emplace(name, std::move(info));
      }
      return;
    }
    file_.emplace(path);
  } catch (const InputError& e) {
    throw ModelError(e.what(), e.exit_code());
  }
  for (const std::string& name : file_->names()) tensors_.emplace(name, file_->info(name));
}

const io::TensorInfo* WeightsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void check_tensors(const WeightsFile& file, const std::vector<ExpectedTensor>& expected,
                   const std::string& context) {
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const ExpectedTensor& e : expected) {
    known.insert(e.key);
    const io::TensorInfo* info = file.find(e.key);
    if (!info) {
      if (e.required) {
        problems.push_back("missing key " + e.key + " (expected shape " + shape_text(e.shape) +
                           ")");
      }
      continue;
    }
    if (info->shape != e.shape) {
      problems.push_back(e.key + ": expected shape " + shape_text(e.shape) + ", file has " +
                         shape_text(info->shape));
    } else if (!readable_float_dtype(info->dtype)) {
      problems.push_back(e.key + ": dtype " + info->dtype +
                         " is not supported (F32, F16, BF16, F64, F8_E4M3)");
    }
  }
  for (const auto& [name, info] : file.tensors()) {
    if (!known.count(name)) problems.push_back("unexpected key " + name);
  }
  if (problems.empty()) return;
  std::string msg = file.path() + ": " + problems.front() + " (" + context;
  if (problems.size() > 1) {
    msg += "; " + std::to_string(problems.size() - 1) + " more problem" +
           (problems.size() > 2 ? "s" : "");
  }
  throw ModelError(msg + ")");
}

bool readable_float_dtype(const std::string& dtype) {
  return torch_dtype(dtype) != at::ScalarType::Undefined || dtype == "F8_E4M3";
}

const float* float8_e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) {
      const int sign = b >> 7, exponent = (b >> 3) & 15, mantissa = b & 7;
      float x;
      if (exponent == 15 && mantissa == 7) {
        x = std::numeric_limits<float>::quiet_NaN();  // e4m3fn has no infinities
      } else if (exponent == 0) {
        x = std::ldexp(float(mantissa) / 8.0f, -6);  // subnormal
      } else {
        x = std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
      }
      v[size_t(b)] = sign ? -x : x;
    }
    return v;
  }();
  return table.data();
}

at::Tensor host_tensor(const io::TensorInfo& info) {
  if (info.dtype == "F8_E4M3") {
    at::Tensor out = at::empty(info.shape, at::kFloat);
    const float* table = float8_e4m3_values();
    const auto* bytes = static_cast<const unsigned char*>(info.data);
    float* dst = out.data_ptr<float>();
    for (size_t i = 0; i < info.bytes; ++i) dst[i] = table[bytes[i]];
    return out;
  }
  const at::ScalarType dtype = torch_dtype(info.dtype);
  if (dtype == at::ScalarType::Undefined) {
    throw ModelError("host_tensor: dtype " + info.dtype + " is not a float type", kExitSoftware);
  }
  at::Tensor t = at::empty(info.shape, at::TensorOptions().dtype(dtype));
  std::memcpy(t.data_ptr(), info.data, info.bytes);
  return dtype == at::kFloat ? t : t.to(at::kFloat);
}

}  // namespace wm::models
