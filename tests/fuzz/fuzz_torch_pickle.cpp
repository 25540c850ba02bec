// libFuzzer harness: bytes as a torch.save checkpoint (or its data.pkl) → wm::io::TorchCheckpoint
// (tests/fuzz/targets.h).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::torch_pickle(data, size));
}
