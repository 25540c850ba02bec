#include "io/encoder_check.h"

#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "io/av_handles.h"
#include "io/image_output.h"

namespace wm::io {

std::optional<EncoderProblem> check_encoder(
    const std::string& codec_name, const std::string& pix_fmt,
    const std::vector<std::pair<std::string, std::string>>& options) {
  using Key = EncoderProblem::Key;
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name.c_str());
  if (!codec || codec->type != AVMEDIA_TYPE_VIDEO) {
    return EncoderProblem{Key::kCodec, 0, "no video encoder named '" + codec_name + "'"};
  }
  if (!pix_fmt.empty()) {
    const AVPixelFormat wanted = av_get_pix_fmt(pix_fmt.c_str());
    if (wanted == AV_PIX_FMT_NONE) {
      return EncoderProblem{Key::kPixFmt, 0, "no pixel format named '" + pix_fmt + "'"};
    }
    if (codec->pix_fmts) {
      std::string takes;
      bool supported = false;
      for (const AVPixelFormat* p = codec->pix_fmts; *p != AV_PIX_FMT_NONE; ++p) {
        supported = supported || *p == wanted;
        takes += std::string(takes.empty() ? "" : ", ") + av_get_pix_fmt_name(*p);
      }
      if (!supported) {
        return EncoderProblem{Key::kPixFmt, 0,
                              "encoder " + std::string(codec->name) + " cannot take " + pix_fmt +
                                  " (it takes " + takes + ")"};
      }
    }
    // Frames are converted from RGB float by libswscale or sample by sample: a palette (pal8)
    // or bitstream format is neither's to write.
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(wanted);
    if (!sws_isSupportedOutput(wanted) ||
        (desc->flags &
         (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL))) {
      return EncoderProblem{
          Key::kPixFmt, 0,
          pix_fmt +
              std::string(desc->flags & AV_PIX_FMT_FLAG_PAL ? " is a palette format, which"
                                                            : " is a format") +
              " wmbatch does not write (leave pix_fmt out, or name one such as rgb24, rgba, "
              "yuv420p)"};
    }
  }
  if (options.empty()) return std::nullopt;
  // A context with the encoder's private options, never opened: av_opt_set reports an unknown
  // name or a value of the wrong kind exactly as avcodec_open2's dictionary would.
  CodecContextPtr context(avcodec_alloc_context3(codec));
  if (!context) throw std::bad_alloc();
  for (size_t i = 0; i < options.size(); ++i) {
    const auto& [key, value] = options[i];
    const int rc = av_opt_set(context.get(), key.c_str(), value.c_str(), AV_OPT_SEARCH_CHILDREN);
    if (rc == AVERROR_OPTION_NOT_FOUND) {
      return EncoderProblem{Key::kOption, i,
                            "encoder " + std::string(codec->name) + " has no option '" + key + "'"};
    }
    if (rc < 0) {
      return EncoderProblem{Key::kOption, i,
                            "encoder " + std::string(codec->name) + " rejects '" + value +
                                "' for option '" + key + "': " + av_error_string(rc)};
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_codec_for_output(const std::string& path,
                                                  const std::string& codec_name) {
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name.c_str());
  if (!codec) return std::nullopt;  // check_encoder says so
  if (image_path_kind(path) != ImagePath::kNone) {
    const std::string implied = image_encoder_for(path);
    const AVCodec* image =
        implied.empty() ? nullptr : avcodec_find_encoder_by_name(implied.c_str());
    if (image && image->id != codec->id) {
      return "encoder " + codec_name + " writes " + avcodec_get_name(codec->id) +
             ", not the image format " + avcodec_get_name(image->id) +
             " that the output's extension names (leave encode.codec out for images, or write "
             "a video file such as .mkv)";
    }
    return std::nullopt;
  }
  const AVOutputFormat* format = av_guess_format(nullptr, path.c_str(), nullptr);
  if (!format || (format->flags & AVFMT_NOFILE)) return std::nullopt;  // check_container's
  if (avformat_query_codec(format, codec->id, FF_COMPLIANCE_EXPERIMENTAL) == 0) {
    return "container " + std::string(format->name) + " cannot hold " +
           avcodec_get_name(codec->id) + " (encoder " + codec_name +
           "); pick another encoder, or a container such as .mkv";
  }
  return std::nullopt;
}

std::optional<std::string> check_container(const std::string& path) {
  const AVOutputFormat* format = av_guess_format(nullptr, path.c_str(), nullptr);
  if (!format) return "no container format for this file name extension";
  if (format->flags & AVFMT_NOFILE) {
    return "container " + std::string(format->name) +
           " writes its files itself, so they cannot be written atomically (verified, then "
           "renamed into place); write a video file such as .mkv (e.g. encode.codec: ffv1 or "
           "png for lossless frames) and extract images from it";
  }
  return std::nullopt;
}

}  // namespace wm::io
