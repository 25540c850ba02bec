// The end of every muxed output (VideoWriter, segment assembly): a temp file becomes the final
// file only when it is complete, durable and verified.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

extern "C" {
#include <libavformat/avformat.h>
}

namespace wm::io {

// After av_write_trailer on `output` (writing `temp_path`): closes its pb, fsyncs the file,
// re-reads it and checks that stream 0 holds `frames` packets, renames it to `final_path` and
// fsyncs the folder so the rename survives a crash. Throws OutputError (kExitIoErr) naming
// `final_path`; on a throw the temp file is still there for the caller to remove.
// `before_rename`, when set, runs once the temp file is verified and durable, just before the
// rename (the farm records the file's size and mtime there, which the rename keeps, so a run
// killed between the rename and its journal row still knows the output as its own).
void commit_output(AVFormatContext* output, const std::string& temp_path,
                   const std::string& final_path, int64_t frames,
                   const std::function<void(const std::string& temp_path)>& before_rename = {});

// An exclusive lock on a final output path, held by the one process that may write it, from
// before its on_exists check until its temp file is renamed into place: two processes writing one
// output (the same job started twice, two jobs with one output) take turns, and the second then
// sees the first's finished file (skips it, fails with "output exists", or overwrites it with its
// own, as on_exists says). The lock is an empty hidden file "<folder>/.<name>.wmlock" (empty: it
// takes no space on a full disk), flock()ed; the kernel drops it when the holder dies, and the
// holder removes the file when it lets go, so nothing is left beside the output. Waits (logging
// once that it waits), checking `cancel` every 100 ms (wm::Cancelled). Move-only.
class OutputLock {
 public:
  OutputLock(const std::string& final_path, const std::atomic<bool>* cancel);
  ~OutputLock();
  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&&) = delete;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// The folder of `path` ("." when it has none).
std::string parent_folder(const std::string& path);

// The video stream to decode: libav's pick unless it is cover art; otherwise the largest video.
// -1 when there is none.
int pick_video_stream(AVFormatContext* format);

}  // namespace wm::io
