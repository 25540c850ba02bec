// Finding the device layer's LibTorch table (torch_side.h), linked in or from wmbatch-torch.so.
#include "parallel/torch_side.h"

#include "src/base/error.h"
#include "src/models/torch_side.h"

// Defined by the LibTorch side (parallel/torch/torch_entry.cpp); weak for the reason given at
// wm_torch_models (src/models/torch_side.cpp).
extern "C" const wm::parallel::TorchDevices* wm_torch_devices() __attribute__((weak));

namespace wm::parallel {
namespace {

const TorchDevices* find_table() {
  using Entry = const TorchDevices* (*)();
  Entry entry = wm_torch_devices;
  if (!entry) entry = reinterpret_cast<Entry>(models::torch_side_symbol("wm_torch_devices"));
  const TorchDevices* table = entry();
  if (!table || table->abi != kTorchDevicesAbi || table->size != sizeof(TorchDevices)) {
    throw Error("the LibTorch side is from another build of wmbatch; rebuild or reinstall both",
                kExitSoftware);
  }
  return table;
}

}  // namespace

const TorchDevices& torch_devices() {
  static const TorchDevices* table = find_table();
  return *table;
}

}  // namespace wm::parallel
