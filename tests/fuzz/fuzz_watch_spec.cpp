// libFuzzer harness: WATCH.yaml text → wm::watch::parse_watch_text (tests/fuzz/targets.h).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::watch_spec(data, size));
}
