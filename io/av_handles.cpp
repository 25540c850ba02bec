#include "io/av_handles.h"

#include <new>

#include "src/base/error.h"

extern "C" {
#include <libavutil/error.h>
}

namespace wm::io {

FramePtr make_frame() {
  FramePtr frame(av_frame_alloc());
  if (!frame) throw std::bad_alloc();
  return frame;
}

PacketPtr make_packet() {
  PacketPtr packet(av_packet_alloc());
  if (!packet) throw std::bad_alloc();
  return packet;
}

std::string av_error_string(int rc) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(rc, text, sizeof(text));
  return text;
}

int av_check(int rc, const char* call, const std::string& path, int exit_code) {
  if (rc < 0) {
    throw AvError(path + ": " + call + ": " + av_error_string(rc), rc, call, exit_code);
  }
  return rc;
}

}  // namespace wm::io
