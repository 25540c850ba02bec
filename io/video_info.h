// What a demuxed video stream is: size, timing, colour and HDR metadata. Plain data, no libav
// types, so src/ and scheduler/ can use it without libav headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wm::io {

struct Rational {
  int num = 0;
  int den = 1;
  double value() const { return den ? double(num) / den : 0.0; }
};

struct VideoInfo {
  std::string path;
  int width = 0;
  int height = 0;
  int bit_depth = 8;            // bits per component of the source pixel format
  std::string pix_fmt;          // source pixel format name, e.g. "yuv420p10le"
  std::string codec;            // e.g. "h264"
  Rational time_base;           // stream time base; frame pts are in this unit
  Rational frame_rate;          // average frame rate (0/1 when unknown)
  int64_t frames_estimate = 0;  // nb_frames or duration*rate; 0 when unknown
  double duration_seconds = 0;
  int64_t start_pts = 0;         // pts of the first frame in presentation order (stream start_time)
  Rational sample_aspect_ratio;  // 0/1 when unknown
  // Colour description as libav enum values (AVColorPrimaries, AVColorTransferCharacteristic,
  // AVColorSpace, AVColorRange). 2 = unspecified.
  int color_primaries = 2;
  int color_trc = 2;
  int colorspace = 2;
  int color_range = 0;
  // av_display_rotation_get() of the display matrix: counter-clockwise degrees, so a phone's
  // portrait video ("rotate=90", shown turned 90° clockwise) has -90.
  double rotation_degrees = 0;
  std::vector<uint8_t> display_matrix;  // raw AV_PKT_DATA_DISPLAYMATRIX (36 bytes) or empty
  // HDR10 static metadata: the container's, else what the first decoded frame carries (SEI, as
  // x265 writes it).
  std::vector<uint8_t> mastering_display;  // raw AVMasteringDisplayMetadata or empty
  std::vector<uint8_t> content_light;      // raw AVContentLightMetadata or empty
  bool hdr10_plus = false;    // frames carry HDR10+ dynamic metadata (SMPTE ST 2094-40)
  bool dolby_vision = false;  // Dolby Vision configuration or RPUs
  bool alpha = false;         // the source pixel format has an alpha channel
  // AVFieldOrder of the source stream (0 unknown, 1 progressive, 2 tt, 3 bb, 4 tb, 5 bt); from
  // the first frame when the container does not say.
  int field_order = 0;
  // The reader deinterlaces (ReaderOptions::deinterlace): its frames are progressive.
  bool deinterlaced = false;
  int audio_streams = 0;
  int subtitle_streams = 0;
};

}  // namespace wm::io
