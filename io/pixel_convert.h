// Pixel-format conversion between libav frames and Planar RGB float, with the colour matrix and
// range rule shared by VideoReader and VideoWriter (so a round trip uses the same matrix twice).
//
// Colour matrix rule: the frame's AVColorSpace when it names a YUV matrix libswscale knows
// (BT.709, FCC, BT.601 625/525, SMPTE 240M, BT.2020); when it is unspecified (or reserved,
// YCgCo, ...) BT.709 for height >= 720 and BT.601 below, the same guess players make.
// Range: the frame's AVColorRange; unspecified means limited ("tv") for YUV, full for RGB/JPEG.
//
// YUV goes through libswscale's frame API with slice threads; RGB and gray sources are read
// sample by sample (exact; libswscale would pass them through its 15-bit internal YUV). Internal to
// io/ (libav types). Not thread-safe: one converter per thread.
#pragma once

#include <string>

#include "io/av_handles.h"
#include "src/base/planar.h"

namespace wm::io {

// The AVColorSpace value actually used to convert YUV of this height (see the rule above).
int effective_colorspace(int colorspace, int height);
// True when the pixel format stores RGB (or gray) rather than YUV; no matrix applies.
bool is_rgb_format(AVPixelFormat format);
// Bits per component of the format's first component (8 for yuv420p, 10 for yuv420p10le).
int format_bit_depth(AVPixelFormat format);
// True when the pixel format stores an alpha channel (yuva420p, rgba, rgba64be, ya16, ...).
bool has_alpha(AVPixelFormat format);
// True when `frame` has alpha: its format stores it, or it is a palette image (pal8: PNG with a
// tRNS chunk, GIF) whose palette has an entry that is not opaque.
bool frame_has_alpha(const AVFrame& frame);
// What a frame's pixel format keeps of a picture, for telling a change of format midway: bits
// per component, alpha (frame_has_alpha), gray. A palette image is 8-bit RGB. Formats alike
// here (nv12 and yuv420p, yuvj420p and yuv420p) hold the same picture.
struct FormatFamily {
  int depth = 8;
  bool alpha = false;
  bool gray = false;
  bool operator==(const FormatFamily& o) const {
    return depth == o.depth && alpha == o.alpha && gray == o.gray;
  }
  bool operator!=(const FormatFamily& o) const { return !(*this == o); }
  std::string describe() const;  // "8-bit RGB/YUV with alpha", "16-bit gray"
};
FormatFamily format_family(const AVFrame& frame);

// Alpha: Planar stays RGB (the models take 3 channels); alpha travels beside it as a [1,1,H,W]
// float plane in [0,1] (VideoFrame::alpha). Samples are read and written directly (exact: no
// matrix, always full range).
// Reads the alpha samples of `frame` (frame_has_alpha) into `out`.
void read_alpha(const AVFrame& frame, Planar& out);
// Writes `alpha` ([1,1,>=H,>=W], top-left part used; clamped to [0,1]) into the alpha component
// of `frame`, or opaque when `alpha` is null or empty. No effect on formats without alpha.
void write_alpha(const Planar* alpha, AVFrame& frame);

// swscale flags for the two directions. Same-size conversions: the filter only resamples chroma.
// See the .cpp for the measured costs behind these choices.
extern const int kDecodeSwsFlags;
extern const int kEncodeSwsFlags;

// Decoded frame (any format libswscale reads) → Planar [3,1,H,W] RGB float in [0,1].
class FrameToPlanar {
 public:
  // threads: swscale slice threads, 0 = one per core.
  explicit FrameToPlanar(int threads = 0) : threads_(threads) {}
  // Converts `frame` into `out`, reusing out's buffer when it already has the right shape.
  // Rebuilds the scaler when the frame's size, format, matrix or range changes. With `alpha`,
  // a frame with an alpha channel also fills it (read_alpha); it is emptied otherwise.
  void convert(const AVFrame& frame, Planar& out, Planar* alpha = nullptr);

 private:
  SwsContextPtr sws_;
  int width_ = 0, height_ = 0, format_ = -1, colorspace_ = -1, range_ = -1;
  int threads_;
};

// Planar [3,1,H,W] RGB float (clamped to [0,1]) → frame of a fixed size and pixel format. RGB
// formats of up to 16 bits are written sample by sample (exact: a 16-bit PNG keeps every level);
// others go through libswscale.
// The input may be larger than the frame (in_width x in_height, set with crop_from()): its
// top-left part is converted (an encoder that needs even sizes gets the last odd column/row
// cropped).
class PlanarToFrame {
 public:
  // colorspace/range: the tags the output carries (the rule above picks the matrix used when the
  // colorspace is unspecified). Throws AvError when libswscale cannot convert to `format`.
  PlanarToFrame(int width, int height, AVPixelFormat format, int colorspace, int range,
                int threads = 0);
  // Inputs are in_width x in_height (>= the frame size) from now on.
  void crop_from(int in_width, int in_height);
  // `out` must have width/height/format set and buffers allocated (writable). A format with
  // alpha gets `alpha` (same size as `in`), or opaque when it is null or empty.
  void convert(const Planar& in, AVFrame& out, const Planar* alpha = nullptr);

 private:
  SwsContextPtr sws_;  // null for the direct RGB path
  int width_, height_;
  int in_width_, in_height_;
};

}  // namespace wm::io
