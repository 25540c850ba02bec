// What a file name says it holds, before anything opens it: a video container, an image, a
// tensor file. For the places that must guess without libav (src/ never includes it): a folder
// given as an input (its media files, in name order) and a video given where a job file is
// expected (tools/wmbatch.cpp shows the one-line command instead).
#pragma once

#include <string>

namespace wm {

enum class MediaName { kNone, kVideo, kImage, kTensor };

// By the extension, case-insensitively: .mp4 .mkv .mov .webm .avi .ts .nut .y4m ... (video), .png
// .jpg .tif .exr .dpx ... (image), .safetensors (tensor).
MediaName media_name_kind(const std::string& path);

}  // namespace wm
