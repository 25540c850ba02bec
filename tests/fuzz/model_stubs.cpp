// fuzz_job_spec compiles the model registry (src/models/registry.cpp, the list job validation
// asks) but none of the models: their constructors stand here, so the harness needs no LibTorch
// libraries and no model code built with the fuzzer's instrumentation. The fuzzer only parses
// and validates jobs; building a model from it is an error. A kind added to the registry with a
// new constructor shows up as an undefined symbol at this link: add it here.
#include <memory>

#include "src/base/error.h"
#include "src/model.h"
#include "src/models/aoti.h"
#include "src/models/realesrgan.h"
#include "src/models/resample.h"
#include "src/models/seedvr2_vae.h"
#include "src/models/torchscript.h"
#include "src/models/wan21_vae.h"

namespace wm::models {
namespace {

[[noreturn]] std::unique_ptr<Model> no_models() {
  throw ModelError("the fuzz build has no models");
}

}  // namespace

void use_all_cpu_threads() {}
std::unique_ptr<Model> make_resampler(const ModelConfig&) { no_models(); }
std::unique_ptr<Model> make_realesrgan(const ModelConfig&, const Device&) { no_models(); }
std::unique_ptr<Model> make_torchscript(const ModelConfig&, const Device&) { no_models(); }
std::unique_ptr<Model> make_aoti(const ModelConfig&, const Device&) { no_models(); }
std::unique_ptr<Model> make_wan21_vae(const ModelConfig&, const Device&) { no_models(); }
std::unique_ptr<Model> make_seedvr2_vae(const ModelConfig&, const Device&) { no_models(); }

}  // namespace wm::models
