// Device discovery: turns a job's `devices:` value into the list of devices to run on.
#pragma once

#include <string>
#include <vector>

#include "src/model.h"

namespace wm::parallel {

// Number of CUDA devices visible to LibTorch (0 on CPU builds or hosts without a GPU). On CUDA
// builds it loads LibTorch (parallel/torch_side.h); builds without CUDA answer 0 at once.
int cuda_device_count();

// `spec` is "cpu", "auto" (all GPUs, else cpu) or a list of CUDA indices; "cpu" never loads
// LibTorch, the others do on CUDA builds (they count the GPUs). Throws ConfigError-free
// wm::Error (kExitDataErr) when a requested GPU does not exist.
std::vector<Device> resolve_devices(const std::string& spec, const std::vector<int>& ids = {});

}  // namespace wm::parallel
