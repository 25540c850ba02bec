// Routes libav's log output (av_log) into the wmbatch loggers, so libav lines share the one stderr
// sink, format and level with ours instead of interleaving raw text.
#pragma once

namespace wm::io {

// Installs the av_log callback (idempotent, thread-safe). Lines go to the logger "libav",
// prefixed by libav's own context ("[h264 @ 0x...]"). Levels: panic/fatal/error → error,
// warning → warn, info → debug (libav's info is chatty: encoder stats, stream dumps),
// verbose/debug/trace → trace. VideoReader and VideoWriter call this in their constructors.
void install_av_log();

}  // namespace wm::io
