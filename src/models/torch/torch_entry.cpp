// The LibTorch side's table for the models (torch_side.h): its one entry point, wm_torch_models,
// and the kinds' constructors by name (torch_kinds.h).
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "src/base/error.h"
#include "src/models/resample/resample.h"
#include "src/models/resample/torch/lanczos_resize.h"
#include "src/models/torch/tensor.h"
#include "src/models/torch/torch_kinds.h"
#include "src/models/torch_side.h"

namespace wm::models {
namespace {

// Filled during static initialisation by the *_kinds.cpp files; read-only after it.
std::map<std::string, ModelFactory>& factories() {
  static std::map<std::string, ModelFactory> table;
  return table;
}

std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device) {
  const ModelFactory make = torch_kind_factory(config.kind);
  if (!make) {
    throw ModelError("model kind '" + config.kind + "' has no constructor in the LibTorch side",
                     kExitSoftware);
  }
  return make(config, device);
}

Planar resize_plane(const Planar& plane, int width, int height) {
  return guarded("alpha resize", [&] {
    const at::Tensor x = to_tensor(plane.clone()).view({1, 1, plane.height, plane.width});
    return to_planar(lanczos_resize(x, height, width).view({1, 1, height, width}));
  });
}

TorchModels make_table() {
  TorchModels t;
  t.make_model = make_model;
  t.resample_torch = resample_torch;
  t.resize_plane = resize_plane;
  return t;
}

}  // namespace

TorchKind::TorchKind(const char* kind, ModelFactory make) {
  if (!factories().emplace(kind, make).second) {
    // Static initialisation: no logger yet, and no job to fail.
    std::fprintf(stderr, "wmbatch: model kind %s is registered twice on the LibTorch side\n", kind);
    std::abort();
  }
}

ModelFactory torch_kind_factory(const std::string& kind) {
  const auto it = factories().find(kind);
  return it == factories().end() ? nullptr : it->second;
}

std::vector<std::string> torch_kind_names() {
  std::vector<std::string> names;
  for (const auto& entry : factories()) names.push_back(entry.first);
  return names;
}

}  // namespace wm::models

// Called once per process by torch_models() (src/models/torch_side.cpp).
extern "C" const wm::models::TorchModels* wm_torch_models() {
  // LibTorch's CPU ops get every core from the start (Debian's build starts with one thread).
  wm::models::use_all_cpu_threads();
  static const wm::models::TorchModels table = wm::models::make_table();
  return &table;
}
