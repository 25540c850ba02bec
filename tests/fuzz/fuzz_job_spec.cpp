// libFuzzer harness: job-file text → wm::parse_job_text (tests/fuzz/targets.h).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::job_spec(data, size));
}
