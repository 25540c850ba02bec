// What a job asks of libav, checked before any job runs (the runner calls these while it
// validates job files; src/job_spec.cpp cannot, as src/ does not include libav). Each check
// returns the problem as text, or nothing; the caller names the file, line and key.
// Linear in the number of options; nothing is opened or written.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wm::io {

struct EncoderProblem {
  enum class Key { kCodec, kPixFmt, kOption } key = Key::kCodec;
  size_t option = 0;    // kOption: index into the options given
  std::string message;  // "no video encoder named 'libx246'"
};

// The encoder `codec` exists and encodes video; `pix_fmt` (when not empty) is a pixel format it
// takes; every option is one the encoder or the generic codec context knows, with a value it
// accepts (as avcodec_open2 would set it; values parsed only when the encoder opens, such as
// x264-params, are checked then).
std::optional<EncoderProblem> check_encoder(
    const std::string& codec, const std::string& pix_fmt,
    const std::vector<std::pair<std::string, std::string>>& options);

// Whether the encoder `codec` (one check_encoder accepts) writes what the output `path` holds:
// for an image output (io/image_output.h), the image format its extension names (.png: png,
// .jpg: mjpeg, .tif: tiff); for a video file, a codec its container can store (libavformat's
// avformat_query_codec, at its most permissive: libx264 into .webm is refused, anything into
// .mkv taken). The problem as text, or nothing.
std::optional<std::string> check_codec_for_output(const std::string& path,
                                                  const std::string& codec);

// The container the file name `path` picks: none, or one that writes files itself (image2 for
// .png/.jpg/.tif, HLS, DASH, segment: AVFMT_NOFILE) is refused, as such output cannot be written
// to a temp file and renamed into place (nothing half-written at a final path). Image outputs
// (io/image_output.h) are written atomically another way: preflight does not ask this of them.
std::optional<std::string> check_container(const std::string& path);

}  // namespace wm::io
