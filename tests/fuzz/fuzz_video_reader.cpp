// libFuzzer harness: bytes as a video file → wm::io::VideoReader (tests/fuzz/targets.h).
// libav itself is not instrumented (Debian's build): coverage guides through our code only, and
// a bug inside libav shows up only when it crashes.
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
  return wm::fuzz::require(wm::fuzz::video_reader(data, size));
}
