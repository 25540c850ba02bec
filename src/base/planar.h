// Planar: the buffer that crosses the io/ ↔ src/ boundary. A dense float32 block laid out
// [channels][frames][height][width], owning its memory, move-only (copies are explicit: clone()).
// io/ fills it from decoded frames (RGB in [0,1]); src/ wraps it as a tensor for the models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace wm {

struct Planar {
  int channels = 0;
  int frames = 0;
  int height = 0;
  int width = 0;
  std::vector<float> data;

  Planar() = default;
  Planar(int c, int t, int h, int w)
      : channels(c), frames(t), height(h), width(w), data(size_t(c) * t * h * w) {}
  // A moved-from Planar is empty (all sizes 0), so its sizes never describe memory it lacks.
  Planar(Planar&& other) noexcept { *this = std::move(other); }
  Planar& operator=(Planar&& other) noexcept {
    if (this != &other) {
      channels = std::exchange(other.channels, 0);
      frames = std::exchange(other.frames, 0);
      height = std::exchange(other.height, 0);
      width = std::exchange(other.width, 0);
      data = std::move(other.data);
      other.data.clear();
    }
    return *this;
  }
  Planar(const Planar&) = delete;
  Planar& operator=(const Planar&) = delete;

  Planar clone() const {
    Planar out;
    out.channels = channels;
    out.frames = frames;
    out.height = height;
    out.width = width;
    out.data = data;
    return out;
  }
  bool empty() const { return data.empty(); }
  size_t plane_size() const { return size_t(height) * width; }
  // Pointer to plane (c, t): height*width floats, rows of width.
  float* plane(int c, int t) { return data.data() + (size_t(c) * frames + t) * plane_size(); }
  const float* plane(int c, int t) const {
    return data.data() + (size_t(c) * frames + t) * plane_size();
  }
};

}  // namespace wm
