// fuzz_job_spec compiles the model registry (src/models/registry.cpp, the list job validation
// asks) but none of the models: the built-in resampler's constructor and the LibTorch side's
// table (src/models/torch_side.h) stand here, so the harness needs no LibTorch libraries and no
// model code built with the fuzzer's instrumentation. The fuzzer only parses and validates jobs;
// building a model from it is an error. A torch-free constructor added to the registry shows up
// as an undefined symbol at this link: add it here.
#include <memory>

#include "src/base/error.h"
#include "src/model.h"
#include "src/models/resample/resample.h"
#include "src/models/torch_side.h"

namespace wm::models {
namespace {

[[noreturn]] std::unique_ptr<Model> no_models() {
  throw ModelError("the fuzz build has no models");
}

}  // namespace

std::unique_ptr<Model> make_resampler(const ModelConfig&) { no_models(); }
const TorchModels& torch_models() { no_models(); }

}  // namespace wm::models
