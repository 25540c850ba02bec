#include "tests/support/planar_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "src/models/resample/resample.h"

namespace wm::test {

Planar frames(const Planar& p, int t0, int n, int c0, int nc) {
  if (nc == 0) nc = p.channels - c0;
  Planar out(nc, n, p.height, p.width);
  for (int c = 0; c < nc; ++c) {
    std::memcpy(out.plane(c, 0), p.plane(c0 + c, t0), size_t(n) * p.plane_size() * sizeof(float));
  }
  return out;
}

Planar lanczos_x2(const Planar& image) {
  Planar out = models::resample_cpu(models::resample_kernel("lanczos", 2), image.clone());
  for (float& v : out.data) v = std::min(1.0f, std::max(0.0f, v));
  return out;
}

Planar concat(const std::vector<Planar>& parts) {
  int total = 0;
  for (const Planar& p : parts) total += p.frames;
  const Planar& head = parts.at(0);
  Planar out(head.channels, total, head.height, head.width);
  int t0 = 0;
  for (const Planar& p : parts) {
    EXPECT_EQ(p.channels, head.channels);
    EXPECT_EQ(p.plane_size(), head.plane_size());
    for (int c = 0; c < p.channels; ++c) {
      std::memcpy(out.plane(c, t0), p.plane(c, 0),
                  size_t(p.frames) * p.plane_size() * sizeof(float));
    }
    t0 += p.frames;
  }
  return out;
}

namespace {

template <class A, class B>
double max_abs_diff_of(const A& a, const B& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();  // NaN is never close
    m = std::max(m, d);
  }
  return m;
}

}  // namespace

double max_abs_diff(const Planar& a, const Planar& b) {
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_EQ(a.frames, b.frames);
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.width, b.width);
  return max_abs_diff_of(a.data, b.data);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return max_abs_diff_of(a, b);
}

Planar read_planar(const io::SafetensorsFile& file, const std::string& name) {
  const io::TensorInfo& info = file.info(name);
  EXPECT_EQ(info.dtype, "F32") << name;
  std::vector<int64_t> shape = info.shape;
  if (shape.size() == 5) {
    EXPECT_EQ(shape[0], 1) << name;
    shape.erase(shape.begin());
  }
  EXPECT_EQ(shape.size(), 4u) << name;
  if (shape.size() != 4) return Planar();
  Planar p(static_cast<int>(shape[0]), static_cast<int>(shape[1]), static_cast<int>(shape[2]),
           static_cast<int>(shape[3]));
  EXPECT_EQ(info.bytes, p.data.size() * sizeof(float)) << name;
  std::memcpy(p.data.data(), info.data, std::min<size_t>(info.bytes, p.data.size() * 4));
  return p;
}

Planar read_planar(const std::string& path, const std::string& name) {
  io::SafetensorsFile file(path);
  return read_planar(file, name);
}

std::vector<float> read_floats(const std::string& path, const std::string& name) {
  io::SafetensorsFile file(path);
  const io::TensorInfo& info = file.info(name);
  EXPECT_EQ(info.dtype, "F32") << path << ": " << name;
  std::vector<float> out(info.bytes / sizeof(float));
  std::memcpy(out.data(), info.data, out.size() * sizeof(float));
  return out;
}

}  // namespace wm::test
