// The constructors of the model kinds that compute with LibTorch, by kind name: the LibTorch
// side's half of the registry (src/models/registry.h holds every kind's torch-free facts: tasks,
// options, traits). The one model entry across the boundary (TorchModels::make_model,
// src/models/torch_side.h) looks the kind up here, so a new kind changes neither that table nor
// its ABI: its family registers it in its own torch/ folder, in a file `<name>_kinds.cpp` that
// opens with WM_TORCH_KINDS(<name>) and holds one TorchKind per kind.
//
// Linking: a static library's object is linked only when something references it, so
// WM_TORCH_KINDS(name) defines the symbol wm_torch_kinds_<name>, which every program linking
// wm_core_torch is made to reference (src/CMakeLists.txt finds the *_kinds.cpp files; no list to
// keep). wmbatch-torch.so holds every object of the side anyway.
//
// Threading: registration runs during static initialisation (of the program, or of the module
// when wmbatch loads it); lookups come after it, from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::models {

using ModelFactory = std::unique_ptr<Model> (*)(const ModelConfig& config, const Device& device);

// Registers `make` as the constructor of kind `kind` (a static object of a *_kinds.cpp). Two
// registrations of one kind stop the program at start (a build error, not a job's).
struct TorchKind {
  TorchKind(const char* kind, ModelFactory make);
};

// The constructor of `kind`, or null when no family registered it.
ModelFactory torch_kind_factory(const std::string& kind);
// Every registered kind, sorted.
std::vector<std::string> torch_kind_names();

}  // namespace wm::models

// Opens a family's *_kinds.cpp: the anchor symbol that keeps the file in every link.
#define WM_TORCH_KINDS(name) \
  extern "C" void wm_torch_kinds_##name() {}
