// SourceCopy: what an output takes from its source file besides the encoded video, in one
// routine for VideoWriter and concat_segments: audio and subtitle packets (interleaved by time
// with the video), chapters, attachments (fonts of ASS subtitles) and cover art, the tags of the
// source's video stream and of the file.
//
// What the output container cannot hold is never silent: a warning naming the output and a line
// of dropped() ("subtitle stream #2 (subrip): container mp4 cannot hold it"). Streams the choice
// leaves out (audio: none) are the job's decision, not reported. Streams the demuxer itself
// discards (mov's chapter text track, which it exposes as chapters) are not streams to copy.
// - chapters: Matroska/WebM, the mp4/mov family and Ogg hold them.
// - attachments: Matroska only.
// - cover art (attached pictures): the mp4/mov family as an attached picture; Matroska as an
//   attachment "cover.png"/"cover.jpg" (libavformat 5.1's Matroska muxer would write an attached
//   picture as a video track), which demuxers show as cover art again.
// - other video streams and data streams: dropped() lines.
// Internal to io/ (libav types). Not thread-safe: one thread muxes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/av_handles.h"

namespace spdlog {
class logger;
}

namespace wm::io {

struct CopyChoice {
  bool audio = true;
  bool subtitles = true;
  bool other = true;  // chapters, attachments, cover art
};

class SourceCopy {
 public:
  // Opens `source_path` (InputError naming it when it cannot be read) and adds the streams and
  // chapters it copies to `output`, whose header is not written yet. The tags of the source's
  // main video stream go to `video` (the output's video stream). Messages name `output_name`.
  // Standard input ("pipe:0") is read again through io/stdin_tee.h (stdin_from_start() must
  // hold).
  SourceCopy(const std::string& source_path, AVFormatContext* output, AVStream* video,
             const CopyChoice& choice, const std::string& output_name,
             std::shared_ptr<spdlog::logger> log);
  ~SourceCopy();
  SourceCopy(const SourceCopy&) = delete;
  SourceCopy& operator=(const SourceCopy&) = delete;

  // Hands `write` each copied packet whose timestamp is <= `ts` (in `tb`), or every one left
  // when `all`, in source order, with its stream index and timestamps set for the output;
  // `write` must consume (unref) it. A read error stops the copy with a warning.
  void copy_until(int64_t ts, AVRational tb, bool all, const std::function<void(AVPacket*)>& write);

  // What the output cannot hold of the source, one line each.
  const std::vector<std::string>& dropped() const { return dropped_; }

 private:
  void drop(const std::string& what);
  bool copyable(unsigned index, const AVStream* in);
  void add_cover_attachment(const AVStream* in);
  void copy_chapters();
  void copy_video_tags(AVStream* video, int main_video);

  std::string source_path_;
  std::string output_name_;
  AVFormatContext* output_;
  CopyChoice choice_;
  std::shared_ptr<spdlog::logger> log_;
  AVIOContext* stdin_io_ = nullptr;  // standard input's reader, which source_ does not own
  FormatInputPtr source_;
  std::vector<int> stream_map_;  // source stream index → output stream index, -1 = not copied
  PacketPtr packet_ = make_packet();
  bool pending_ = false;  // packet_ holds the next packet, not yet due
  bool done_ = false;
  std::vector<std::string> dropped_;
};

}  // namespace wm::io
