// Colour properties read from libav's C structs. C lets an enum field hold any int, and decoders
// pass on a bitstream's code that libav has no name for (fuzzing: an MPEG-2 sequence display
// extension with matrix_coefficients 65). Reading such a field as its C++ enum type is undefined
// behaviour, and the code would travel on to swscale and the output's metadata. These read the
// field as the int it is and turn a code libav does not know into "unspecified", so the reader's
// documented defaults apply (io/video_reader.h).
#pragma once

#include <cstring>

extern "C" {
#include <libavutil/pixdesc.h>
#include <libavutil/pixfmt.h>
}

namespace wm::io {

namespace detail {
template <typename Enum>
int enum_bits(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "libav enums are int-sized");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}
}  // namespace detail

inline int known_color_space(const AVColorSpace& field) {
  const int v = detail::enum_bits(field);
  return v >= 0 && v < AVCOL_SPC_NB && av_color_space_name(AVColorSpace(v)) ? v
                                                                            : AVCOL_SPC_UNSPECIFIED;
}
inline int known_color_primaries(const AVColorPrimaries& field) {
  const int v = detail::enum_bits(field);
  return v >= 0 && v < AVCOL_PRI_NB && av_color_primaries_name(AVColorPrimaries(v))
             ? v
             : AVCOL_PRI_UNSPECIFIED;
}
inline int known_color_trc(const AVColorTransferCharacteristic& field) {
  const int v = detail::enum_bits(field);
  return v >= 0 && v < AVCOL_TRC_NB && av_color_transfer_name(AVColorTransferCharacteristic(v))
             ? v
             : AVCOL_TRC_UNSPECIFIED;
}
inline int known_color_range(const AVColorRange& field) {
  const int v = detail::enum_bits(field);
  return v >= 0 && v < AVCOL_RANGE_NB ? v : AVCOL_RANGE_UNSPECIFIED;
}

}  // namespace wm::io
