// VideoWriter: encode RGB float frames and mux them with the source's audio and subtitle packets
// into a file that appears at its final path only when complete and verified.
//
// It writes to "<final>.partial" (hidden temp name in the same folder), copies audio/subtitle
// packets from `source_path` (if any) interleaved by time, carries colour primaries/transfer/
// matrix/range, the rotation display matrix and HDR side data from `source`, writes the trailer,
// fsyncs, reopens the temp file to verify the video frame count, then renames it into place.
// If anything fails (or the object is destroyed before finish()) the temp file is removed and no
// file exists at the final path. Constructor opens or throws OutputError (kExitCantCreat for an
// unwritable folder) / AvError. Move-only; one thread writes.
//
// Colour: RGB is converted with the source's YUV matrix; when that is unspecified, BT.709 for
// an output height >= 720 and BT.601 below (the rule VideoReader uses to read the output back).
// The output carries the source's primaries/transfer/matrix tags as they are; the range is the
// source's, or limited ("tv") when unspecified, and is tagged.
// pix_fmt: the setting, else yuv420p (8-bit source) / yuv420p10le (deeper); when the encoder
// cannot take the default, its nearest supported format (an explicit unsupported pix_fmt is an
// error). Streams the container cannot hold (e.g. subrip in mp4) are skipped with a warning.
// The display matrix is carried as stream side data (mp4/mov write it; libavformat 5.1's
// Matroska muxer does not), as are mastering display / content light metadata. Stream tags
// (language, ...) of copied streams and the source's file-level tags are copied too.
// Errors: OutputError kExitCantCreat when the folder is missing or unwritable or the container
// cannot hold the codec; OutputError kExitIoErr when a write, fsync, verify or rename fails.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/video_info.h"
#include "io/video_reader.h"

namespace wm::io {

struct EncodeSettings {
  std::string codec = "libx264";  // libx264 | ffv1 | prores_ks | any libav encoder name
  int crf = 18;                   // libx264 only (ignored when < 0)
  std::string preset = "medium";  // libx264 only
  std::string pix_fmt;            // empty: yuv420p for 8-bit sources, yuv420p10le for >8-bit
  int threads = 0;                // encoder threads, 0 = auto (one per core; x264's auto)
  int convert_threads = 1;  // swscale slice threads for RGB→YUV, 0 = one per core (see reader)
  // write_batch(): frames converted at once, each by one thread with its own converter (the same
  // pixels as one at a time, unlike swscale's slice threads).
  int convert_workers = 4;
  // > 0: the encoder's own threads (x264's frame and lookahead threads, libavcodec's worker
  // threads) run this much nicer than the thread that builds the writer (Linux: they inherit the
  // nice value of the thread that opens the encoder). Jobs whose model runs on a GPU set it, so
  // x264's many threads do not delay the thread that feeds the GPU.
  int nice = 0;
  // Encoder options by libav name (private or generic: tune, x264-params, g, ...), set after crf
  // and preset. One the encoder does not take is an error (kExitDataErr), not a warning.
  std::vector<std::pair<std::string, std::string>> options;
  bool copy_audio = true;
  bool copy_subtitles = true;
};

struct WriterConfig {
  std::string path;  // final output path; container from the extension
  int width = 0;     // encoded frame size
  int height = 0;
  Rational time_base;       // unit of VideoFrame::pts given to write()
  Rational frame_rate;      // nominal rate (for the encoder's rate control and the container)
  std::string source_path;  // file to copy audio/subtitles from; empty for none
  VideoInfo source;         // colour/HDR/rotation metadata to carry (may be default)
  EncodeSettings encode;
  // mp4/mov: movie and track timescale = time_base, so the edit list that places a stream not
  // starting at 0 keeps every pts exact (farm segments; the default movie timescale, 1/1000 s,
  // rounds the start of e.g. 30000/1001 fps chunks). Other containers: no effect.
  bool exact_timescale = false;
};

class VideoWriter {
 public:
  explicit VideoWriter(const WriterConfig& config);
  ~VideoWriter();  // removes the temp file unless finish() succeeded
  VideoWriter(VideoWriter&&) noexcept;
  VideoWriter& operator=(VideoWriter&&) noexcept;

  // Encodes one frame: `frame.image` is [3,1,height,width] RGB in [0,1] (values outside are
  // clamped); `frame.pts` in config.time_base, strictly increasing.
  void write(const VideoFrame& frame);
  // write() of each frame in order, their RGB→YUV conversions first, in parallel
  // (EncodeSettings::convert_workers).
  void write_batch(const std::vector<VideoFrame>& frames);
  // Flushes the encoder, copies the remaining audio/subtitle packets, writes the trailer,
  // fsyncs, verifies, renames to the final path. Returns the number of video frames written.
  int64_t finish();
  int64_t frames_written() const;

  // Where the writer spent its time (wall seconds): converting frames to the encoder's format
  // (a batch's workers together count once), handing them to the encoder and muxing what it
  // gave back; in finish(), flushing the encoder (the frames its lookahead and threads still
  // held) and writing the trailer, then committing (close, fsync, verify, rename).
  struct Seconds {
    double convert = 0;
    double encode = 0;
    double flush = 0;
    double commit = 0;
  };
  Seconds seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::io
