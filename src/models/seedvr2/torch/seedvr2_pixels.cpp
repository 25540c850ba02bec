#include "src/models/seedvr2/torch/seedvr2_pixels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace wm::models::seedvr2 {
namespace {

// Keys' cubic convolution kernel with a = −0.5.
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

// The [n_out, n_in] matrix of one axis: row i holds output i's normalised tap weights.
at::Tensor axis_weights(int64_t n_in, int64_t n_out) {
  const double scale = double(n_in) / double(n_out);
  const double support = 2.0 * std::max(scale, 1.0);
  const double inv = 1.0 / std::max(scale, 1.0);
  at::Tensor m = at::zeros({n_out, n_in}, at::kDouble);
  double* p = m.data_ptr<double>();
  for (int64_t i = 0; i < n_out; ++i) {
    const double center = scale * (double(i) + 0.5);
    // Truncation toward zero, as the C++ kernel's int casts.
    const int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(int64_t(center + support + 0.5), n_in);
    std::vector<double> w;
    double total = 0;
    for (int64_t j = lo; j < hi; ++j) {
      w.push_back(cubic((double(j) - center + 0.5) * inv));
      total += w.back();
    }
    for (int64_t j = lo; j < hi; ++j) {
      p[i * n_in + j] = total != 0.0 ? w[size_t(j - lo)] / total : 0.0;
    }
  }
  return m;
}

// One blur of the wavelet decomposition: the 3×3 binomial kernel with dilation r, edges
// replicated by r.
at::Tensor blur(const at::Tensor& x, int64_t r) {
  const int64_t c = x.size(1);
  static const float k[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
  const at::Tensor kernel =
      (at::from_blob(const_cast<float*>(k), {1, 1, 3, 3}, at::kFloat).to(x.device()) / 16.0)
          .expand({c, 1, 3, 3})
          .contiguous();
  const at::Tensor padded = at::replication_pad2d(x, {r, r, r, r});
  return at::conv2d(padded, kernel, at::Tensor(), at::IntArrayRef{1, 1}, at::IntArrayRef{0, 0},
                    at::IntArrayRef{r, r}, c);
}

// (high, low): the detail of five levels and the low band left.
std::pair<at::Tensor, at::Tensor> decompose(const at::Tensor& x) {
  at::Tensor high = at::zeros_like(x), low = x;
  for (int64_t level = 0; level < 5; ++level) {
    const at::Tensor next = blur(low, int64_t(1) << level);
    high += low - next;
    low = next;
  }
  return {high, low};
}

}  // namespace

at::Tensor resize_bicubic_aa(const at::Tensor& x, int64_t h, int64_t w) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor wh = axis_weights(x.size(2), h).to(x.device(), at::kFloat);
  const at::Tensor ww = axis_weights(x.size(3), w).to(x.device(), at::kFloat);
  // Columns first, then rows.
  return at::matmul(wh, at::matmul(xf, ww.t()));
}

at::Tensor wavelet_color_fix(const at::Tensor& content, const at::Tensor& style) {
  return decompose(content).first + decompose(style).second;
}

at::Tensor adain_color_fix(const at::Tensor& content, const at::Tensor& style) {
  auto stats = [](const at::Tensor& x) {
    const at::Tensor flat = x.flatten(2);
    const at::Tensor mean = flat.mean(2).unsqueeze(-1).unsqueeze(-1);
    const at::Tensor std =
        (flat.var(2, /*unbiased=*/true) + 1e-5).sqrt().unsqueeze(-1).unsqueeze(-1);
    return std::make_pair(mean, std);
  };
  const auto [cm, cs] = stats(content);
  const auto [sm, ss] = stats(style);
  return (content - cm) / cs * ss + sm;
}

}  // namespace wm::models::seedvr2
