// libFuzzer harness: bytes as a .safetensors file → wm::io::SafetensorsFile (tests/fuzz/targets.h).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::safetensors(data, size));
}
