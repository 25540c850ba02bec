#include "io/version.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
}

namespace wm::io {

std::string libav_versions() {
  auto v = [](unsigned x) {
    return std::to_string(x >> 16) + "." + std::to_string((x >> 8) & 0xff) + "." +
           std::to_string(x & 0xff);
  };
  return "libavformat " + v(avformat_version()) + ", libavcodec " + v(avcodec_version()) +
         ", libavutil " + v(avutil_version());
}

}  // namespace wm::io
