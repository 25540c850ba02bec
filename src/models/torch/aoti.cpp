#include "src/models/aoti.h"

#include <torch/version.h>

#include "src/base/error.h"
#include "src/models/torch/scripted_model.h"
#include "src/models/torch/tensor.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define WM_HAVE_AOTI 1
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace wm::models {

std::unique_ptr<Model> make_aoti(const ModelConfig& config, const Device& device) {
#ifdef WM_HAVE_AOTI
  std::shared_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  try {
    loader = std::make_shared<torch::inductor::AOTIModelPackageLoader>(config.weights);
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    throw ModelError(config.weights +
                     ": not an AOTInductor package: " + msg.substr(0, msg.find('\n')));
  }
  auto forward = [loader](const at::Tensor& x) {
    std::vector<at::Tensor> out = loader->run({x});
    if (out.size() != 1)
      throw ModelError("the package returns " + std::to_string(out.size()) +
                       " tensors, expected 1");
    return out.front();
  };
  return make_scripted_model(config.weights + " (aoti)", forward, config, device);
#else
  (void)device;
  throw ModelError(config.weights + ": kind aoti needs LibTorch 2.6 or newer (this build has " +
                   TORCH_VERSION + ")");
#endif
}

}  // namespace wm::models
