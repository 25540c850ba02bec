// Planar: the buffer that crosses the io/ ↔ src/ boundary. A dense float32 block laid out
// [channels][frames][height][width], owning its memory, move-only (copies are explicit: clone()).
// io/ fills it from decoded frames (RGB in [0,1]); src/ wraps it as a tensor for the models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

namespace wm {

// io/ hands Planar memory to libswscale as a GBRPF32 frame without copying, and libswscale
// (6.7, Debian 12) reads up to 32 bytes past the last row of such a source (SIMD loads), and
// writes up to 20 bytes past a destination 1 or 2 pixels wide; found by fuzzing, measured with a
// guard page after the buffer (docs/testing.md). So every Planar allocation carries this much
// slack past its last element: those accesses stay inside memory it owns.
constexpr size_t kPlanarTailBytes = 64;

template <class T>
struct TailPaddedAllocator {
  using value_type = T;
  TailPaddedAllocator() = default;
  template <class U>
  TailPaddedAllocator(const TailPaddedAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T) + kPlanarTailBytes));
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p); }
  template <class U>
  bool operator==(const TailPaddedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const TailPaddedAllocator<U>&) const noexcept {
    return false;
  }
};

using PlanarData = std::vector<float, TailPaddedAllocator<float>>;

struct Planar {
  int channels = 0;
  int frames = 0;
  int height = 0;
  int width = 0;
  PlanarData data;

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

// Copies `part` into frames [frame, +part.frames) and rows [row, +part.height) of `whole` (a
// split slice's part into the slice's output). False, and nothing copied, when it does not fit
// (other channels or width, or past the end).
inline bool place(const Planar& part, Planar& whole, int frame, int row) {
  if (part.channels != whole.channels || part.width != whole.width || frame < 0 || row < 0 ||
      frame + part.frames > whole.frames || row + part.height > whole.height) {
    return false;
  }
  const size_t w = size_t(whole.width);
  for (int c = 0; c < part.channels; ++c) {
    for (int t = 0; t < part.frames; ++t) {
      std::memcpy(whole.plane(c, frame + t) + size_t(row) * w, part.plane(c, t),
                  size_t(part.height) * w * sizeof(float));
    }
  }
  return true;
}

}  // namespace wm
