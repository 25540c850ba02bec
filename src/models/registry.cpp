// make_model: the one place that maps a config's `kind` to an implementation.
#include "src/base/error.h"
#include "src/model.h"
#include "src/models/resample.h"
#include "src/models/seedvr2_vae.h"
#include "src/models/tensor.h"
#include "src/models/wan21_vae.h"

namespace wm {

std::unique_ptr<Model> make_model(const ModelConfig& config, const Device& device) {
  models::use_all_cpu_threads();
  if (config.kind == "lanczos" || config.kind == "bicubic") return models::make_resampler(config);
  if (config.kind == "wan2.1-vae") return models::make_wan21_vae(config, device);
  if (config.kind == "seedvr2-vae") return models::make_seedvr2_vae(config, device);
  throw ModelError("model kind '" + config.kind + "' is not available in this build");
}

}  // namespace wm
