#include "src/models/wan21_vae.h"

#include "src/base/error.h"

namespace wm::models {

// Replaced by the real implementation (issue 3).
std::unique_ptr<Model> make_wan21_vae(const ModelConfig&, const Device&) {
  throw ModelError("wan2.1-vae: not implemented yet");
}

}  // namespace wm::models
