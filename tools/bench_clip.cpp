#include "tools/bench_clip.h"

#include <algorithm>
#include <cstdint>

#include "io/video_writer.h"

namespace wm::bench {

void write_synthetic_clip(const std::string& path, int width, int height, int frames,
                          const std::string& preset, int crf) {
  io::WriterConfig config;
  config.path = path;
  config.width = width;
  config.height = height;
  config.time_base = {1, 25};
  config.frame_rate = {25, 1};
  config.encode.codec = "libx264";
  config.encode.preset = preset;
  config.encode.crf = crf;
  config.encode.copy_audio = false;
  config.encode.copy_subtitles = false;
  config.encode.copy_other = false;
  io::VideoWriter writer(config);
  uint32_t seed = 12345;
  for (int t = 0; t < frames; ++t) {
    io::VideoFrame frame;
    frame.index = frame.pts = t;
    frame.duration = 1;
    frame.image = Planar(3, 1, height, width);
    for (int c = 0; c < 3; ++c) {
      float* p = frame.image.plane(c, 0);
      for (int y = 0; y < height; ++y) {
        for (int x = 0; x < width; ++x) {
          seed = seed * 1664525u + 1013904223u;
          const float noise = float(seed >> 24) / 255.f - 0.5f;
          const int bar = ((x + 8 * t) / 97 + y / 61 + c) % 3;
          p[size_t(y) * width + x] = std::clamp(
              0.15f + 0.5f * float((x + 3 * t) % width) / float(width) * float(c + 1) / 3.f +
                  0.2f * float(y) / float(height) + 0.15f * float(bar) + 0.05f * noise,
              0.f, 1.f);
        }
      }
    }
    writer.write(frame);
  }
  writer.finish();
}

}  // namespace wm::bench
