// Farm segments: counting the frames of an input, probing a finished segment, and concatenating
// segments into one output without re-encoding (stream copy), with the source's audio and
// subtitles muxed once over the whole duration, and its chapters, attachments and cover art
// (SourceCopy, the routine VideoWriter uses).
//
// A segment is a video-only file of one chunk of frames, encoded by its own encoder (so it starts
// with an IDR frame) with the source's pts. Concatenation copies the video packets of every
// segment in order, keeping their timestamps (they are already the source's), and interleaves the
// audio/subtitle packets of the source by time, the way VideoWriter does for a single run. The
// output is written as "<output>.partial", fsynced, re-read to verify its video frame count, and
// renamed into place; on any failure the temp file is removed and nothing is at the final path.
// The output is muxed bit-exact (AVFMT_FLAG_BITEXACT: no random Matroska segment UID, no library
// version string), so the same segments always give the same bytes.
// Not thread-safe; one thread per call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/video_info.h"

namespace wm::io {

// Frames of the video stream VideoReader would decode, counted as its demuxed packets (no
// decoding; mp4/mov: the sample table's count). Throws InputError like VideoReader's constructor.
int64_t count_video_frames(const std::string& path);

struct SegmentInfo {
  std::string path;
  int64_t frames = 0;     // video packets
  int64_t first_pts = 0;  // smallest / largest video pts, in time_base
  int64_t last_pts = 0;
  Rational time_base;
  std::string codec;  // e.g. "h264"
  int width = 0;
  int height = 0;
  std::string codec_config;  // the stream's extradata (parameter sets), raw bytes
};

// Demuxes a segment (video stream 0) and reports what it holds. Throws InputError (kExitDataErr)
// naming the file when it cannot be read or has no video.
SegmentInfo probe_segment(const std::string& path);

struct ConcatConfig {
  std::vector<std::string> segments;  // in frame order
  std::string output;                 // final path; container from the extension
  std::string source_path;  // audio/subtitles (and file tags) come from here; may be empty
  bool copy_audio = true;
  bool copy_subtitles = true;
  bool copy_other = true;                     // chapters, attachments, cover art (io/stream_copy.h)
  const std::atomic<bool>* cancel = nullptr;  // set → throws wm::Cancelled, output removed
  // Runs with the verified, fsynced temp file just before it is renamed into place
  // (commit_output's before_rename).
  std::function<void(const std::string& temp_path)> before_rename;
};

// Concatenates the segments' video (which must share codec, size and parameter sets, with
// strictly increasing pts across segment boundaries) into `output`. Returns the video frames
// written. Throws InputError (kExitDataErr) for a segment that does not fit, OutputError for write
// failures, Cancelled on request.
int64_t concat_segments(const ConcatConfig& config);

}  // namespace wm::io
