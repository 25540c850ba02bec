// Standard input and output as a job's input or output (`input: -`, `wmbatch upscale - -o -`).
// Every spelling a user may give is mapped to libav's own names, "pipe:0" and "pipe:1", once, where
// the job is read (src/job_spec.cpp); the readers and writers (io/) then open those names as
// they are. A real file is always an absolute path after validation, so the two names never
// clash with one.
#pragma once

#include <string>

namespace wm {

inline constexpr const char* kStdinName = "pipe:0";
inline constexpr const char* kStdoutName = "pipe:1";

// "-", "pipe:", "pipe:0", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0".
inline bool is_stdin_name(const std::string& s) {
  return s == "-" || s == "pipe:" || s == "pipe:0" || s == "/dev/stdin" || s == "/dev/fd/0" ||
         s == "/proc/self/fd/0";
}

// "-", "pipe:", "pipe:1", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1".
inline bool is_stdout_name(const std::string& s) {
  return s == "-" || s == "pipe:" || s == "pipe:1" || s == "/dev/stdout" || s == "/dev/fd/1" ||
         s == "/proc/self/fd/1";
}

// The containers a stream on standard output may be written as (`format:` / `--format`): those
// whose muxers write straight through, never seeking back. Key → libav muxer name.
struct StreamFormat {
  const char* key;
  const char* muxer;
};
inline constexpr StreamFormat kStreamFormats[] = {
    {"mkv", "matroska"}, {"nut", "nut"}, {"y4m", "yuv4mpegpipe"}, {"ts", "mpegts"}};

// The muxer of a `format:` key, or "" when the key is not one of kStreamFormats.
inline std::string stream_muxer(const std::string& key) {
  for (const StreamFormat& f : kStreamFormats) {
    if (key == f.key) return f.muxer;
  }
  return {};
}

}  // namespace wm
