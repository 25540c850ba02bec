// Models that also run on named host tensors, as a whole: the golden tensor jobs (task `dit`,
// and `upscale` of a .safetensors input with `debug_tensors`) reach SeedVR2's DiT and its
// pipeline this way, with every intermediate. The scheduler finds the capability by a
// dynamic_cast of the job's Model (kinds are data: no kind name is compared).
//
// Torch-free. Threading: run_tensors() may be called from any thread, one call at a time per
// model.
#pragma once

#include <string>
#include <vector>

#include "src/model.h"

namespace wm {

// A host tensor by name: StateTensor's form (dtype "F32", "F64", "U8", ...; row-major bytes).
using HostTensor = StateTensor;

class TensorModel {
 public:
  virtual ~TensorModel() = default;
  // Runs `op` on `inputs` and returns its outputs (the main one first); with `debug` also the
  // intermediates. Throws ModelError (exit 65) naming a missing or mis-shaped input, InputError
  // for bad values.
  virtual std::vector<HostTensor> run_tensors(const std::string& op,
                                              const std::vector<HostTensor>& inputs,
                                              bool debug) const = 0;
};

}  // namespace wm
