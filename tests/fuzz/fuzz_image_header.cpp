// libFuzzer harness: bytes as an image file → wm::io::VideoReader, the first frame written as a
// PNG by wm::io::VideoWriter (tests/fuzz/targets.h). libav is not instrumented (Debian's build).
#include "src/base/log.h"
#include "tests/fuzz/targets.h"

extern "C" {
#include <libavutil/log.h>
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!wm::fuzz::verbose()) {
    wm::log::set_level("off");
    av_log_set_level(AV_LOG_QUIET);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return wm::fuzz::require(wm::fuzz::image_header(data, size));
}
