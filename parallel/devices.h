// Device discovery: turns a job's `devices:` value into the list of devices to run on.
#pragma once

#include <string>
#include <vector>

#include "src/model.h"

namespace wm::parallel {

// Number of CUDA devices visible to LibTorch (0 on CPU builds or hosts without a GPU).
int cuda_device_count();

// `spec` is "cpu", "auto" (all GPUs, else cpu) or a list of CUDA indices. Throws ConfigError-free
// wm::Error (kExitDataErr) when a requested GPU does not exist.
std::vector<Device> resolve_devices(const std::string& spec, const std::vector<int>& ids = {});

}  // namespace wm::parallel
