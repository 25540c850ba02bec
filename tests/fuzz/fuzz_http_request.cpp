// libFuzzer harness: bytes from a client → the status page's request parsing,
// wm::watch::parse_http_request (tests/fuzz/targets.h).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::http_request(data, size));
}
