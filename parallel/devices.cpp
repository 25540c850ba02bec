#include "parallel/devices.h"

#include "parallel/torch_side.h"
#include "src/base/error.h"

namespace wm::parallel {

int cuda_device_count() {
#ifdef WMBATCH_WITH_CUDA
  return torch_devices().cuda_device_count();
#else
  return 0;  // known without loading LibTorch: a CPU job starts in milliseconds
#endif
}

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
