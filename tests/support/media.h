// Test media: tiny clips generated with libav (a moving colour pattern plus a sine tone, optional
// subtitles, VFR timing, colour tags, rotation and HDR side data), a libav-based probe that
// decodes what a file really holds, and temp dirs. Independent of io/VideoWriter on purpose:
// the clips are what the writer's tests compare against. Throws std::runtime_error on failure.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/video_info.h"
#include "io/video_reader.h"

namespace wm::test {

struct ClipSpec {
  int width = 64, height = 48, frames = 10;
  io::Rational fps{25, 1};
  std::string codec = "libx264";  // any libav video encoder (libx264, ffv1, prores_ks, ...)
  std::string pix_fmt = "yuv420p";
  std::string container_ext = ".mp4";
  bool video = true;  // false: an audio-only file (frames/fps still set its length)
  bool grey = false;  // neutral chroma (R = G = B): the luma gradient alone
  int gop = 0;        // keyframe interval (libx264 keyint), 0 = encoder default
  bool audio = true;  // mono 440 Hz sine as long as the video
  int audio_rate = 48000;
  std::string audio_codec;  // empty: aac (flac would do in .mkv; pcm_s16le in .mov/.mkv)
  bool subtitles = false;   // two events: mov_text in mp4/mov, subrip in mkv (or subtitle_codec)
  std::string subtitle_codec;
  std::string language = "eng";  // language tag of the audio and subtitle streams
  // Variable frame rate: frame durations cycle 1,2,1,3 × (1/fps), in a 1/1000 time base.
  bool vfr = false;
  // Colour tags as libav enum values (AVColorPrimaries, ..., AVColorRange). 2/0 = unspecified.
  int color_primaries = 2, color_trc = 2, colorspace = 2, color_range = 0;
  bool rotation_90 = false;    // display matrix side data: 90° counter-clockwise
  bool hdr_side_data = false;  // mastering display (BT.2020, 1000 nits) + content light 1000/400
  // When set, every pixel has these component codes (Y,U,V or R,G,B, in the format's bit depth)
  // instead of the pattern: for exact colour checks.
  bool flat = false;
  std::array<int, 3> flat_value{0, 0, 0};
  // Encoder options (after the defaults), e.g. {"x265-params", "master-display=...:max-cll=..."}.
  std::vector<std::pair<std::string, std::string>> codec_options;
  // Pixel formats with alpha get alpha_value() as their alpha (0 = transparent).
  // Interlaced: each frame's bottom field shows the picture half a frame later (the bars moved),
  // flagged top field first; libx264 codes it interlaced, other codecs by the container's flag.
  bool interlaced = false;
  int chapters = 0;              // chapters splitting the clip evenly, titled "Chapter N"
  bool font_attachment = false;  // a TrueType font attachment "font.ttf" (Matroska)
  bool cover_art = false;        // a PNG attached picture (mp4/mov: covr, Matroska: attachment)
  bool data_stream = false;      // an SMPTE KLV data stream with a packet per frame (MPEG-TS)
  bool dolby_vision = false;     // a Dolby Vision configuration record (stream side data)
  std::string timecode;          // "HH:MM:SS:FF": the video's timecode (mov: a tmcd track)
};

// The alpha the clips get at (x, y): a ramp from transparent (left) to opaque (right), in [0, 1].
double alpha_value(int x, int y, int width, int height);

// Writes the clip to `path` (the container comes from the path's extension).
void make_clip(const std::string& path, const ClipSpec& spec);
// A picture (or `frames` of them: an animated or multi-frame file where the format has one) of
// the pattern without audio, through `codec` in `pix_fmt` (make_clip).
void make_image(const std::string& path, const std::string& codec, const std::string& pix_fmt,
                int width = 24, int height = 16, int frames = 1);

// The pattern's value of component `c` (0..2) at (x, y) of frame `t`, in [0, 1]: gradients in x
// and y (fine enough for > 256 distinct levels in 10-bit), moving bars with hard edges.
double pattern_value(int c, int x, int y, int t, int width, int height);

struct Probe {
  int width = 0, height = 0;
  std::string pix_fmt, codec;
  int64_t video_frames = 0;        // decoded frames
  std::vector<int64_t> video_pts;  // decoded frames' best-effort pts, presentation order
  io::Rational video_time_base;
  double video_duration = 0;  // seconds: stream duration, else end of the last frame
  bool has_audio = false;
  double audio_duration = 0;  // seconds: sum of the first audio stream's packet durations
  std::string audio_codec, audio_language;
  int audio_streams = 0, subtitle_streams = 0;
  std::vector<std::string> subtitle_codecs;
  int subtitle_packets = 0;
  int color_primaries = 2, color_trc = 2, colorspace = 2, color_range = 0;
  double rotation = 0;  // av_display_rotation_get of the display matrix, 0 if none
  bool has_mastering_display = false;
  bool has_content_light = false;
  // The same side data carried by the first decoded frame (in the bitstream, e.g. HEVC SEI).
  bool frame_mastering_display = false;
  bool frame_content_light = false;
  int field_order = 0;            // AVFieldOrder of the video stream
  bool frame_interlaced = false;  // the first decoded frame is flagged interlaced
  bool frame_top_field_first = false;
  int chapters = 0;
  std::vector<std::string> chapter_titles;
  std::vector<std::string> attachments;  // file names of attachment streams
  int attached_pictures = 0;             // video streams with the attached-picture disposition
  int data_streams = 0;
  bool has_dolby_vision = false;  // Dolby Vision configuration side data
  std::string timecode;           // the video stream's "timecode" tag
};

Probe probe(const std::string& path);

// A fresh directory /tmp/wm-<tag>-XXXXXX.
std::string make_temp_dir(const std::string& tag);

// Owns a temp dir; removes it recursively on destruction. Move-only.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A batch of `count` lossless clips clip0.mkv, clip1.mkv, ... in `dir` (ffv1 in `pix_fmt`, no
// audio), clip i of the {width, height, frames} that `shape(i)` gives: distinct per clip, so a
// mix-up of outputs or report lines shows. Returns the file names.
std::vector<std::string> make_batch_clips(const TempDir& dir, int count, const std::string& pix_fmt,
                                          const std::function<std::array<int, 3>(int)>& shape);

// Decodes every frame of `path` with io::VideoReader.
std::vector<io::VideoFrame> read_all(const std::string& path,
                                     const io::ReaderOptions& options = {});

}  // namespace wm::test
