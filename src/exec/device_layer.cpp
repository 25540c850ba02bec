// Where parallel/ installs the device layer that models ask (device_context.h). LibTorch side.
#include <atomic>

#include "src/base/error.h"
#include "src/exec/device_context.h"

namespace wm::exec {
namespace {
std::atomic<DeviceLayer*> g_layer{nullptr};
}  // namespace

void install_device_layer(DeviceLayer* layer) { g_layer.store(layer); }

DeviceLayer& device_layer() {
  DeviceLayer* layer = g_layer.load();
  if (!layer) {
    throw ModelError(
        "no device layer: this program lacks the device layer's LibTorch side "
        "(wm_parallel_torch)");
  }
  return *layer;
}

}  // namespace wm::exec
