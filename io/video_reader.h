// VideoReader: demux + decode the best video stream of a file into RGB float frames.
// Constructor opens or throws (InputError with kExitNoInput for a missing/unreadable file,
// InputError kExitDataErr for no video stream / unsupported codec / a file libav cannot open or
// probe, e.g. an mp4 cut before its moov box, AvError otherwise). Every message is one line that
// starts with the path. Move-only. Not thread-safe: one thread reads.
//
// What only frames carry: the constructor decodes the first frame (returned by the first read())
// and fills VideoInfo from it where the container is silent: HDR10 mastering display and content
// light (HEVC SEI, as x265 writes them), HDR10+ / Dolby Vision presence, the field order.
//
// Interlacing (ReaderOptions::deinterlace): auto deinterlaces a source flagged interlaced (its
// field order, or its first frame) with libavfilter's bwdif, one frame per frame with the pts kept,
// and says so in the log; off returns the frames with both fields; bwdif always deinterlaces.
//
// Alpha: a source with an alpha channel fills VideoFrame::alpha.
//
// Colour: frames are converted with the stream's YUV matrix and range; when the matrix is
// unspecified, BT.709 is assumed for height >= 720 and BT.601 below, and an unspecified range is
// limited ("tv") for YUV (see io/pixel_convert.h; VideoWriter applies the same rule).
//
// Truncation: a file that ends early is an InputError (kExitDataErr) "PATH: truncated or corrupt
// (...)": when libav cannot open it, when the demuxer reports a read error, when a packet fails to
// decode beyond ReaderOptions::max_error_rate, or at the end of a read from the start when more
// than one frame is missing: fewer packets than the declared frame count (mp4/mov), or the video
// ending more than 1.5 frame durations before its declared end (Matroska per-track DURATION tag,
// stream duration; the file duration only when the file has no other stream).
// Files that declare neither (e.g. MPEG-TS) are checked by decode errors alone.
//
// Hardware decoding (ReaderOptions::nvdec): libavcodec's NVDEC hwaccel on one CUDA device, for
// codecs whose decoder has it (H.264, HEVC, AV1, VP9, MPEG-2, ...). Decoded frames are copied to
// system memory (NV12, P010, ... as NVDEC hands them over) and converted like software frames;
// H.264/HEVC decoding is bit-exact, so the RGB frames match a software read. When NVDEC cannot be
// used (no CUDA driver or device, a codec or stream NVDEC does not take, a setup error, or a
// failure before the first frame is out), the reader decodes the file in software from the
// start, with one warning naming the file and the reason; libav's own lines about the abandoned
// attempt go to the debug level. decoder_name() says which decoder is in use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/video_info.h"
#include "io/yuv_image.h"
#include "src/base/planar.h"

namespace wm::io {

struct VideoFrame {
  int64_t index = 0;     // 0-based index in presentation order, counted from the stream start
  int64_t pts = 0;       // in VideoInfo::time_base (best-effort timestamp, never AV_NOPTS_VALUE)
  int64_t duration = 0;  // in time_base, 0 when unknown
  Planar image;          // [3, 1, height, width], RGB in [0, 1] (full range), source colour matrix
                         // (planes R, G, B)
  // [1, 1, height, width] in [0, 1] (0 transparent) when the source has an alpha channel, else
  // empty. Beside `image` rather than a 4th channel: the models take RGB.
  Planar alpha;
};

// Deinterlacing: off (frames keep both fields, the output is flagged with the source's field
// order), bwdif (libavfilter's bwdif, one frame per frame, for every frame), auto (bwdif when the
// source is flagged interlaced: its field order, or its first frame).
enum class Deinterlace { kOff, kAuto, kBwdif };

struct ReaderOptions {
  // Tolerated fraction of packets that fail to decode before the file counts as corrupt.
  double max_error_rate = 0.0;
  int threads = 0;  // decoder threads, 0 = one per core (libav's "auto")
  // swscale slice threads for the RGB conversion, 0 = one per core. Default 1: FFmpeg 5.1's
  // threaded swscale gave run-to-run differences in a few pixels (measured), and the pipeline
  // already overlaps conversion with the model and the encoder.
  int convert_threads = 1;
  // Decode on NVDEC (CUDA device `cuda_device`) where the codec has it; software otherwise and
  // on any failure (see above). Software decoding uses `threads`; NVDEC one parsing thread.
  bool nvdec = false;
  int cuda_device = 0;
  Deinterlace deinterlace = Deinterlace::kAuto;
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
  // out.image's buffer is reused when it already has the frame's shape (pass the same VideoFrame
  // back to avoid a large allocation per frame).
  bool read(VideoFrame& out);
  // read() for the YUV-native path (io/yuv_image.h): the decoded frame in its own pixel format,
  // by reference (out's index, pts and duration are set; out.image and out.alpha are left as they
  // are). Throws Error (kExitSoftware) for a frame whose format YuvImage cannot hold
  // (yuv_device_format: planar, or the semi-planar NV12/P010/... that NVDEC frames are copied
  // out as; check VideoInfo::pix_fmt first).
  bool read_yuv(VideoFrame& out, YuvImage& image);
  // Seeks so that the next read() returns the first frame with index >= `frame_index`
  // (decodes from the preceding keyframe and discards). Used by chunked farm runs.
  // Constant-rate streams (r_frame_rate == avg_frame_rate) seek by pts: index =
  // round((pts - start_pts) / frame duration), checked for every frame from the landing keyframe
  // up to the target; any frame off that grid or out of sequence (a variable-rate stream whose
  // container declares a constant rate) redoes the seek by decoding from the start. Other
  // streams always decode from the start and count. Limit: a declared-constant-rate stream that
  // has gaps only before the landing keyframe gets pts-based indices there.
  // Seeking resets the end-of-stream truncation check (done only for reads from the start).
  // When deinterlacing, the frame before the target is decoded too, so the frames are those of a
  // read from the start.
  void seek_to_frame(int64_t frame_index);
  // Frames returned by read() so far, and packets that failed to decode (tolerated ones).
  int64_t frames_read() const;
  int64_t decode_errors() const;
  // The libavcodec decoder in use: "h264", or "h264 (nvdec)" on NVDEC. Final once the first
  // frame has been read (a fallback to software happens at the latest then, or on a later
  // failure to copy a frame out of GPU memory).
  std::string decoder_name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::io
