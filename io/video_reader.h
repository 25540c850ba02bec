// VideoReader: demux + decode the best video stream of a file into RGB float frames.
// Constructor opens or throws (InputError with kExitNoInput for a missing/unreadable file,
// InputError kExitDataErr for no video stream / unsupported codec, AvError otherwise).
// Move-only. Not thread-safe: one thread reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/video_info.h"
#include "src/base/planar.h"

namespace wm::io {

struct VideoFrame {
  int64_t index = 0;     // 0-based decode-order index of the frame (presentation order)
  int64_t pts = 0;       // in VideoInfo::time_base (best-effort timestamp, never AV_NOPTS_VALUE)
  int64_t duration = 0;  // in time_base, 0 when unknown
  Planar image;          // [3, 1, height, width], RGB in [0, 1] (full range), source colour matrix
};

struct ReaderOptions {
  // Tolerated fraction of packets that fail to decode before the file counts as corrupt.
  double max_error_rate = 0.0;
  int threads = 0;  // decoder threads, 0 = libav default
};

class VideoReader {
 public:
  explicit VideoReader(const std::string& path, const ReaderOptions& options = {});
  ~VideoReader();
  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;

  const VideoInfo& info() const;
  // Decodes the next frame into `out`. Returns false at end of stream. Throws InputError naming
  // the file when the stream is corrupt or truncated beyond the tolerated error rate.
  bool read(VideoFrame& out);
  // Seeks so that the next read() returns the first frame with index >= `frame_index`
  // (decodes from the preceding keyframe and discards). Used by chunked farm runs.
  void seek_to_frame(int64_t frame_index);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::io
