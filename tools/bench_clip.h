// Synthetic clips for the upscale benchmarks, written in process with io::VideoWriter (no
// ffmpeg CLI needed): a moving colour gradient with bars and per-pixel noise, like the footage
// users upscale (libx264, no audio).
#pragma once

#include <string>

namespace wm::bench {

// `frames` frames of WxH at 25 fps, libx264 with `preset` and `crf`. Throws wm::Error.
void write_synthetic_clip(const std::string& path, int width, int height, int frames,
                          const std::string& preset, int crf);

}  // namespace wm::bench
