#include "src/models/resample_yuv.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/base/error.h"

namespace wm::models {
namespace {

template <typename T>
const T* row_of(const SamplePlane& p, int y) {
  return reinterpret_cast<const T*>(static_cast<const uint8_t*>(p.data) + p.stride * y);
}

template <typename T>
T* mutable_row_of(const SamplePlane& p, int y) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(p.data) + p.stride * y);
}

// Output rows [y0, y1): each is a vertical pass over `Taps` source rows (clamped) into a float
// row padded by edge replication, then the horizontal pass phase by phase into contiguous
// scratch rows (vectorisable), interleaved into the output with clamping and rounding.
template <typename T, int Taps>
void plane_rows(const ResampleKernel& k, const SamplePlane& in, const SamplePlane& out, int y0,
                int y1) {
  const int s = k.scale, pad = -k.offset, w = in.width, h = in.height;
  thread_local std::vector<float> buffer;
  const size_t need = size_t(w) + 2 * size_t(pad) + size_t(s) * w;
  if (buffer.size() < need) buffer.resize(need);
  float* row = buffer.data();
  float* scratch = row + w + 2 * pad;
  const float top = float((1 << in.depth) - 1);
  float weights[4][Taps];
  for (int p = 0; p < s; ++p) {
    for (int t = 0; t < Taps; ++t) weights[p][t] = float(k.weights[p][t]);
  }
  for (int y = y0; y < y1; ++y) {
    const int i = y / s;
    const float* wv = weights[y % s];
    const T* src[Taps];
    for (int t = 0; t < Taps; ++t) src[t] = row_of<T>(in, std::clamp(i + t - pad, 0, h - 1));
    float* r = row + pad;
    for (int x = 0; x < w; ++x) {
      float acc = wv[0] * float(src[0][x]);
      for (int t = 1; t < Taps; ++t) acc += wv[t] * float(src[t][x]);
      r[x] = acc;
    }
    std::fill(row, r, r[0]);
    std::fill(r + w, r + w + pad, r[w - 1]);
    for (int p = 0; p < s; ++p) {
      const float* wh = weights[p];
      float* dst = scratch + size_t(p) * w;
      for (int x = 0; x < w; ++x) {
        float acc = wh[0] * row[x];
        for (int t = 1; t < Taps; ++t) acc += wh[t] * row[x + t];
        dst[x] = std::min(top, std::max(0.0f, acc)) + 0.5f;
      }
    }
    T* o = mutable_row_of<T>(out, y);
    if (s == 2) {
      const float* a = scratch;
      const float* b = scratch + w;
      for (int x = 0; x < w; ++x) {
        o[2 * x] = T(a[x]);
        o[2 * x + 1] = T(b[x]);
      }
    } else {
      for (int x = 0; x < w; ++x) {
        for (int p = 0; p < s; ++p) o[size_t(x) * s + p] = T(scratch[size_t(p) * w + x]);
      }
    }
  }
}

template <typename T>
void plane(const ResampleKernel& k, const SamplePlane& in, const SamplePlane& out) {
  using Range = tbb::blocked_range<int>;
  tbb::parallel_for(Range(0, out.height, 16), [&](const Range& range) {
    if (k.taps == 7) {
      plane_rows<T, 7>(k, in, out, range.begin(), range.end());
    } else {
      plane_rows<T, 5>(k, in, out, range.begin(), range.end());
    }
  });
}

}  // namespace

void resample_plane(const ResampleKernel& kernel, const SamplePlane& in, const SamplePlane& out) {
  if (kernel.taps != 7 && kernel.taps != 5) throw ModelError("resample: unsupported kernel size");
  if (kernel.scale < 2 || kernel.scale > 4) throw ModelError("resample: unsupported scale");
  if (out.width != in.width * kernel.scale || out.height != in.height * kernel.scale ||
      out.depth != in.depth || in.depth < 8 || in.depth > 16 || in.width <= 0 || in.height <= 0) {
    throw ModelError("resample: plane sizes or depths do not match the scale");
  }
  if (in.depth == 8) {
    plane<uint8_t>(kernel, in, out);
  } else {
    plane<uint16_t>(kernel, in, out);
  }
}

}  // namespace wm::models
