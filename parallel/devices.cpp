#include "parallel/devices.h"

#include <torch/cuda.h>

#include "src/base/error.h"

namespace wm::parallel {

int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

std::vector<Device> resolve_devices(const std::string& spec, const std::vector<int>& ids) {
  std::vector<Device> out;
  if (spec == "cpu") return {Device{}};
  const int gpus = cuda_device_count();
  if (spec == "auto" && ids.empty()) {
    for (int i = 0; i < gpus; ++i) out.push_back(Device{Device::Kind::kCuda, i});
    if (out.empty()) out.push_back(Device{});
    return out;
  }
  for (int id : ids) {
    if (id < 0 || id >= gpus) {
      throw Error("devices: GPU " + std::to_string(id) + " requested but " + std::to_string(gpus) +
                      " CUDA device(s) are visible",
                  kExitDataErr);
    }
    out.push_back(Device{Device::Kind::kCuda, id});
  }
  return out;
}

}  // namespace wm::parallel
