#include "src/models/lanczos_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace wm::models {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kRadius = 3.0;

double lanczos3(double x) {
  x = std::fabs(x);
  if (x < 1e-12) return 1.0;
  if (x >= kRadius) return 0.0;
  const double px = kPi * x;
  return kRadius * std::sin(px) * std::sin(px / kRadius) / (px * px);
}

// [out, in] weights of one axis: row j resamples output pixel j from the input.
at::Tensor axis_matrix(int in, int out) {
  const double ratio = double(in) / out;        // input pixels per output pixel
  const double stretch = std::max(1.0, ratio);  // widen the kernel when shrinking
  const double support = kRadius * stretch;
  at::Tensor m = at::zeros({out, in}, at::kDouble);
  double* w = m.data_ptr<double>();
  std::vector<double> row(size_t(in), 0.0);
  for (int j = 0; j < out; ++j) {
    std::fill(row.begin(), row.end(), 0.0);
    const double centre = (j + 0.5) * ratio - 0.5;
    const int first = int(std::floor(centre - support)) + 1;
    const int last = int(std::ceil(centre + support)) - 1;
    double sum = 0;
    for (int i = first; i <= last; ++i) {
      const double v = lanczos3((i - centre) / stretch);
      row[size_t(std::clamp(i, 0, in - 1))] += v;
      sum += v;
    }
    for (int i = 0; i < in; ++i) w[size_t(j) * in + i] = row[size_t(i)] / sum;
  }
  return m;
}

}  // namespace

int lanczos_resize_reach(double out_per_in) {
  const double stretch = std::max(1.0, 1.0 / out_per_in);
  return int(std::ceil(kRadius * stretch)) + 1;
}

at::Tensor lanczos_resize(const at::Tensor& x, int out_height, int out_width) {
  const auto h = x.size(2), w = x.size(3);
  if (h == out_height && w == out_width) return x;
  const at::TensorOptions options = x.options().dtype(at::kFloat);
  const at::Tensor rows = axis_matrix(int(h), out_height).to(options);
  const at::Tensor cols = axis_matrix(int(w), out_width).to(options).t();
  at::Tensor y = at::matmul(rows, x.to(at::kFloat));  // [N, C, out_h, W]
  return at::matmul(y, cols).to(x.scalar_type());     // [N, C, out_h, out_w]
}

}  // namespace wm::models
