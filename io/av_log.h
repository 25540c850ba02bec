// Routes libav's log output (av_log) into the wmbatch loggers, so libav lines share the one stderr
// sink, format and level with ours instead of interleaving raw text.
#pragma once

#include <string>

namespace wm::io {

// Installs the av_log callback (idempotent, thread-safe). Lines go to the logger "libav",
// prefixed by libav's own context ("[h264 @ 0x...]"). Levels: panic/fatal/error → error,
// warning → warn, info → debug (libav's info is chatty: encoder stats, stream dumps),
// verbose/debug/trace → trace. VideoReader and VideoWriter call this in their constructors.
void install_av_log();

// While an instance lives, the libav lines logged on the thread that made it go to the debug
// level, and the first warning or error among them is kept: for a libav call whose failure is
// expected and that the caller reports in its own one line (opening a CUDA device for NVDEC on a
// host without one). Only for calls that log on the calling thread. Nests; not movable.
class AvLogCapture {
 public:
  AvLogCapture();
  ~AvLogCapture();
  AvLogCapture(const AvLogCapture&) = delete;
  AvLogCapture& operator=(const AvLogCapture&) = delete;
  // That first warning or error, without libav's "[context @ 0x...]" prefix; empty when none.
  const std::string& first_problem() const { return first_problem_; }

 private:
  std::string first_problem_;
  std::string* outer_;
};

}  // namespace wm::io
