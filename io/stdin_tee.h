// Standard input read twice: a pipe can be read once, but a job reads its source twice — the
// VideoReader demuxes the video, and the VideoWriter's SourceCopy demuxes the audio and subtitles
// to copy them (io/stream_copy.h). Both open standard input ("pipe:0") through this tee: each is
// a consumer with its own position in one buffer of the bytes read from file descriptor 0, which
// keeps the bytes between the slowest and the fastest consumer.
//
// Memory: until a second consumer opens, every byte is kept (the writer opens its copy after the
// reader has probed the stream and decoded a frame), at most kRetainBytes; past that, a consumer
// that opens late cannot (open() returns nullptr; the writer then drops the audio with a line).
// Afterwards the buffer holds what the reader is ahead of the writer: the frames in flight
// (tokens × slice frames), compressed as they came.
//
// Internal to io/. Thread-safe: the reader and the writer's copy read from different threads;
// one of them reads file descriptor 0 at a time, the other waits for its bytes.
#pragma once

#include <cstdint>

extern "C" {
#include <libavformat/avio.h>
}

namespace wm::io {

// An AVIOContext reading standard input from its first byte, for avformat_open_input with
// AVFMT_FLAG_CUSTOM_IO; nullptr when its bytes are no longer kept. Free it with close_stdin().
AVIOContext* open_stdin();
void close_stdin(AVIOContext* io);
// Whether open_stdin() can still start at the first byte.
bool stdin_from_start();

// Bytes kept for a consumer yet to open.
constexpr int64_t kRetainBytes = int64_t(64) << 20;

}  // namespace wm::io
