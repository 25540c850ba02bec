#include "scheduler/quality.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace wm::sched {
namespace {

// Separable Gaussian blur, 11 taps, sigma 1.5, valid region only (output (h-10)×(w-10)).
std::vector<double> blur_valid(const std::vector<double>& in, int h, int w) {
  static const std::vector<double> kernel = [] {
    std::vector<double> k(11);
    double sum = 0;
    for (int i = 0; i < 11; ++i) sum += k[i] = std::exp(-((i - 5) * (i - 5)) / (2 * 1.5 * 1.5));
    for (double& v : k) v /= sum;
    return k;
  }();
  const int oh = h - 10, ow = w - 10;
  std::vector<double> rows(size_t(h) * ow), out(size_t(oh) * ow);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < ow; ++x) {
      double s = 0;
      for (int k = 0; k < 11; ++k) s += kernel[k] * in[size_t(y) * w + x + k];
      rows[size_t(y) * ow + x] = s;
    }
  }
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      double s = 0;
      for (int k = 0; k < 11; ++k) s += kernel[k] * rows[size_t(y + k) * ow + x];
      out[size_t(y) * ow + x] = s;
    }
  }
  return out;
}

}  // namespace

double ssim_plane(const float* a, const float* b, int h, int w) {
  if (h < 11 || w < 11) {
    // Too small for the window: fall back to one global window.
    double ma = 0, mb = 0;
    const int n = h * w;
    for (int i = 0; i < n; ++i) ma += a[i], mb += b[i];
    ma /= n, mb /= n;
    double va = 0, vb = 0, cov = 0;
    for (int i = 0; i < n; ++i) {
      va += (a[i] - ma) * (a[i] - ma);
      vb += (b[i] - mb) * (b[i] - mb);
      cov += (a[i] - ma) * (b[i] - mb);
    }
    va /= n, vb /= n, cov /= n;
    const double c1 = 1e-4, c2 = 9e-4;
    return ((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma * ma + mb * mb + c1) * (va + vb + c2));
  }
  const size_t n = size_t(h) * w;
  std::vector<double> x(n), y(n), xx(n), yy(n), xy(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = a[i], y[i] = b[i];
    xx[i] = x[i] * x[i], yy[i] = y[i] * y[i], xy[i] = x[i] * y[i];
  }
  const auto mx = blur_valid(x, h, w), my = blur_valid(y, h, w);
  const auto sxx = blur_valid(xx, h, w), syy = blur_valid(yy, h, w), sxy = blur_valid(xy, h, w);
  const double c1 = 1e-4, c2 = 9e-4;  // (0.01 L)^2, (0.03 L)^2 with L = 1
  double sum = 0;
  for (size_t i = 0; i < mx.size(); ++i) {
    const double vx = sxx[i] - mx[i] * mx[i], vy = syy[i] - my[i] * my[i];
    const double cov = sxy[i] - mx[i] * my[i];
    sum += ((2 * mx[i] * my[i] + c1) * (2 * cov + c2)) /
           ((mx[i] * mx[i] + my[i] * my[i] + c1) * (vx + vy + c2));
  }
  return sum / double(mx.size());
}

void QualityMeter::add_frame(const Planar& reference, const Planar& output, int t, float scale,
                             float bias) {
  const size_t n = reference.plane_size();
  std::vector<float> luma_ref(n), luma_out(n);
  const float weights[3] = {0.299f, 0.587f, 0.114f};
  for (int c = 0; c < 3; ++c) {
    const float* r = reference.plane(c, t);
    const float* o = output.plane(c, t);
    for (size_t i = 0; i < n; ++i) {
      const float rv = std::clamp((r[i] - bias) / scale, 0.f, 1.f);
      const float ov = std::clamp((o[i] - bias) / scale, 0.f, 1.f);
      const double d = double(rv) - ov;
      squared_error_ += d * d;
      luma_ref[i] += weights[c] * rv;
      luma_out[i] += weights[c] * ov;
    }
  }
  samples_ += 3.0 * double(n);
  ssim_sum_ += ssim_plane(luma_ref.data(), luma_out.data(), reference.height, reference.width);
  ++frames_;
}

double QualityMeter::psnr() const {
  if (samples_ == 0) return 0;
  const double mse = squared_error_ / samples_;
  return mse <= 1e-10 ? 100.0 : 10.0 * std::log10(1.0 / mse);
}

double QualityMeter::ssim() const { return frames_ ? ssim_sum_ / double(frames_) : 0; }

}  // namespace wm::sched
