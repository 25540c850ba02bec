#include "src/media_names.h"

#include <algorithm>
#include <cctype>

namespace wm {
namespace {

// Containers libavformat reads that hold video (the common ones; a file of another extension is
// still read when named on its own).
const char* const kVideo[] = {"mp4", "m4v",  "mov",  "qt",   "mkv",  "webm", "avi", "mxf",
                              "ts",  "mts",  "m2ts", "mpg",  "mpeg", "vob",  "ogv", "flv",
                              "wmv", "asf",  "3gp",  "3g2",  "y4m",  "nut",  "dv",  "f4v",
                              "rm",  "rmvb", "ivf",  "h264", "264",  "hevc", "265", "mjpeg"};
// Still images libav's image2 demuxer reads.
const char* const kImage[] = {"png", "jpg", "jpeg", "tif", "tiff", "bmp", "webp", "exr",
                              "dpx", "tga", "gif",  "jp2", "j2k",  "ppm", "pgm",  "pnm",
                              "pam", "sgi", "pcx",  "jxl", "hdr",  "qoi", "xbm",  "xwd"};

}  // namespace

MediaName media_name_kind(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return MediaName::kNone;
  }
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == "safetensors") return MediaName::kTensor;
  const auto in = [&ext](const auto& list) {
    return std::find(std::begin(list), std::end(list), ext) != std::end(list);
  };
  if (in(kVideo)) return MediaName::kVideo;
  if (in(kImage)) return MediaName::kImage;
  return MediaName::kNone;
}

}  // namespace wm
