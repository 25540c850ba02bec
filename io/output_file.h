// The end of every muxed output (VideoWriter, segment assembly): a temp file becomes the final
// file only when it is complete, durable and verified.
#pragma once

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

// The folder of `path` ("." when it has none).
std::string parent_folder(const std::string& path);

// The video stream to decode: libav's pick unless it is cover art; otherwise the largest video.
// -1 when there is none.
int pick_video_stream(AVFormatContext* format);

}  // namespace wm::io
