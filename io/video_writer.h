// VideoWriter: encode RGB float frames and mux them with the source's audio and subtitle packets
// into a file that appears at its final path only when complete and verified.
//
// It writes to "<final>.partial" (hidden temp name in the same folder), copies audio/subtitle
// packets from `source_path` (if any) interleaved by time, with its chapters, attachments (fonts
// of ASS subtitles) and cover art, carries colour primaries/transfer/matrix/range, the rotation
// display matrix, HDR side data and the field order from `source`, writes the trailer,
// fsyncs, reopens the temp file to verify the video frame count, then renames it into place.
// If anything fails (or the object is destroyed before finish()) the temp file is removed and no
// file exists at the final path. Constructor opens or throws OutputError (kExitCantCreat for an
// unwritable folder) / AvError. Move-only; one thread writes.
//
// Colour: RGB is converted with the source's YUV matrix; when that is unspecified, BT.709 for
// an output height >= 720 and BT.601 below (the rule VideoReader uses to read the output back).
// The output carries the source's primaries/transfer/matrix tags as they are; the range is the
// source's, or limited ("tv") when unspecified, and is tagged.
// pix_fmt: the setting, else the source's own format (its chroma subsampling, bit depth and
// alpha) when the encoder takes it, else the encoder's nearest format (libavcodec's loss ranking);
// a loss of chroma resolution, depth or alpha is a warning and a dropped() line. An explicit
// unsupported pix_fmt is an error. Alpha comes in VideoFrame::alpha (opaque when absent).
// Size: frames are config.width x config.height; an odd size is encoded as it is unless the
// encoder refuses it for its chroma subsampling (x264 4:2:0), then the last column/row is cropped
// (a warning and a dropped() line).
// Streams: audio and subtitles are copied (those the container cannot hold, e.g. subrip in mp4,
// are dropped() lines), chapters where the container holds them, attachments into Matroska, cover
// art (mp4/mov: an attached picture; Matroska: a "cover.png"/"cover.jpg" attachment). Other
// video streams and data streams are dropped() lines. Stream tags of copied streams, of the
// source's video stream and the file-level tags are copied too.
// Rotation: the display matrix is carried as stream side data where the container stores it
// (the mp4/mov family in libavformat 5.1); elsewhere (Matroska) the pixels are turned by quarter
// turns instead (logged), and the encoded size is turned with them.
// HDR: mastering display / content light metadata go to the stream's side data (mp4/mov/mkv
// write them) and, for libx265, into x265-params (master-display, max-cll, unless the job's
// options set them) so the bitstream's SEI has them too. HDR10+ and Dolby Vision metadata cannot
// be written by libavcodec 5.1's encoders: dropped() lines.
// Interlacing: unless the source was deinterlaced (VideoInfo::deinterlaced) an interlaced
// source's field order is the output's (codec parameters, frame flags, x264's interlaced coding);
// a deinterlaced one is flagged progressive.
// Errors: OutputError kExitCantCreat when the folder is missing or unwritable or the container
// cannot hold the codec; OutputError kExitIoErr when a write, fsync, verify or rename fails.
// Standard output (path kStdoutName, src/base/std_streams.h; EncodeSettings::container names the
// muxer): the stream is written straight to file descriptor 1, packets flushed as they come;
// there is no temp file, no verification by reading back and no rename (a pipe cannot take
// anything back), and a failed run leaves what it wrote. A source on standard input (source_path
// kStdinName) is read again from its start through io/stdin_tee.h for its audio and subtitles
// (dropped() lines when its start is no longer kept).
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
  // The muxer by libav name ("matroska", "nut"); empty: the output's extension picks it. Output
  // to standard output (path kStdoutName, src/base/std_streams.h) needs one.
  std::string container;
  // Encoder options by libav name (private or generic: tune, x264-params, g, ...), set after crf
  // and preset. One the encoder does not take is an error (kExitDataErr), not a warning.
  std::vector<std::pair<std::string, std::string>> options;
  bool copy_audio = true;
  bool copy_subtitles = true;
  // Chapters, attachments (fonts of ASS subtitles), cover art; off for farm segments, whose
  // assembly muxes the source's streams.
  bool copy_other = true;
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

// An alpha plane [1,1,h,w] resized to width x height (bicubic, clamped to [0,1]): a source's
// alpha for a model's output size (the models see RGB only). The same plane when the size is.
Planar resize_alpha(const Planar& alpha, int width, int height);

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
  // The YUV-native path (io/yuv_image.h): frames already in the encoder's pixel format.
  // accepts_yuv(): whether pictures decoded in `format` with those colour tags (a source of
  // `source_height` rows) may be written as they are, with the same result as the RGB path's
  // conversions: the encoder takes `format` at the configured size (not cropped, not turned),
  // and the matrix and range the reader would have used are the ones the writer would use.
  bool accepts_yuv(int format, int colorspace, int color_range, int source_height) const;
  // A writable picture in the encoder's format and size, from a pool of buffers (thread-safe).
  YuvImage yuv_buffer();
  // Encodes `image` (from yuv_buffer()) with `timing`'s pts and duration (its image is unused).
  void write_yuv(const VideoFrame& timing, const YuvImage& image);
  // The device frame path: what the encoder takes when it takes planar YUV pictures as they are
  // (not turned into the pixels): false otherwise. The matrix and range are the ones the
  // writer's own RGB conversion would use for this output.
  struct YuvTarget {
    int format = -1;  // AVPixelFormat (yuv_native_format)
    int width = 0;    // the encoded size (an encoder that needs even sizes may crop the
    int height = 0;   // configured one: WriterConfig::width/height)
    int depth = 8;
    int chroma_shift_x = 0, chroma_shift_y = 0;
    int colorspace = 1;  // the effective AVColorSpace (the writer's rule for an unspecified tag)
    bool full_range = false;
  };
  bool yuv_target(YuvTarget& out) const;
  // Encodes a picture of the yuv_target() format and size held elsewhere (the frame path's
  // pinned blocks), without copying it: the encoder keeps `image.owner` alive for as long as it
  // holds the picture. `image.stride` may be any row pitch.
  void write_planes(const VideoFrame& timing, const YuvImage& image);
  // Flushes the encoder, copies the remaining audio/subtitle packets, writes the trailer,
  // fsyncs, verifies, renames to the final path. Returns the number of video frames written.
  int64_t finish();
  int64_t frames_written() const;
  // What the output cannot hold of the source, one line each (each was also a warning in the
  // log): streams the container rejects, a pixel format the encoder cannot keep, alpha, HDR10+ /
  // Dolby Vision, a cropped row or column. Complete once the constructor has returned.
  std::vector<std::string> dropped() const;

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
