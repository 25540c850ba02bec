#include "src/models/resample/resample.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/base/error.h"
#include "src/models/torch_side.h"

namespace wm::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  const double px = kPi * x;
  return std::sin(px) / px;
}

// Support radius of each kernel, in input pixels.
int kernel_radius(const std::string& kind) { return kind == "lanczos" ? 3 : 2; }

// Horizontal pass on one row: `row` holds width + 2*pad edge-replicated pixels; each phase is
// computed into a contiguous scratch row (vectorisable), then interleaved.
template <int Taps>
void horizontal_row(const float* row, int width, const ResampleKernel& k, float* scratch,
                    float* out) {
  const int s = k.scale;
  for (int p = 0; p < s; ++p) {
    float w[Taps];
    for (int t = 0; t < Taps; ++t) w[t] = float(k.weights[p][t]);
    float* dst = scratch + size_t(p) * width;
    for (int i = 0; i < width; ++i) {
      float acc = w[0] * row[i];
      for (int t = 1; t < Taps; ++t) acc += w[t] * row[i + t];
      dst[i] = acc;
    }
  }
  for (int i = 0; i < width; ++i) {
    for (int p = 0; p < s; ++p) out[size_t(i) * s + p] = scratch[size_t(p) * width + i];
  }
}

template <int Taps>
void resample_planes(const ResampleKernel& k, const Planar& in, Planar& out) {
  const int s = k.scale, pad = -k.offset;
  const int h = in.height, w = in.width, ow = w * s;
  const int64_t planes = int64_t(in.channels) * in.frames;
  // Pass 1: rows widened into `wide` [planes, h, ow]: per calling thread (a session's lasting
  // device worker) and reused, not a fresh large allocation, page-faulted and zeroed, per call.
  // (A reference: inside the TBB lambdas the thread_local's name would be each worker's own.)
  thread_local std::vector<float> per_thread;
  if (per_thread.size() < size_t(planes) * h * ow) per_thread.resize(size_t(planes) * h * ow);
  std::vector<float>& wide = per_thread;
  // tbb::parallel_for rather than at::parallel_for: it shares the job graph's TBB workers,
  // where OpenMP's spinning threads fought the encoder's threads (3x slower under load).
  using Range = tbb::blocked_range<int64_t>;
  tbb::parallel_for(Range(0, planes * h, 16), [&](const Range& range) {
    std::vector<float> row(size_t(w) + 2 * pad), scratch(size_t(w) * s);
    for (int64_t r = range.begin(); r < range.end(); ++r) {
      const float* src = in.data.data() + size_t(r) * w;
      std::fill(row.begin(), row.begin() + pad, src[0]);
      std::copy(src, src + w, row.begin() + pad);
      std::fill(row.begin() + pad + w, row.end(), src[w - 1]);
      horizontal_row<Taps>(row.data(), w, k, scratch.data(), wide.data() + size_t(r) * ow);
    }
  });
  // Pass 2: each output row is a weighted sum of whole rows of `wide` (clamped at the edges).
  tbb::parallel_for(Range(0, planes * h * s, 16), [&](const Range& range) {
    for (int64_t r = range.begin(); r < range.end(); ++r) {
      const int64_t plane = r / (int64_t(h) * s);
      const int y = int(r % (int64_t(h) * s));
      const int i = y / s, p = y % s;
      const float* base = wide.data() + size_t(plane) * h * ow;
      const float* src[Taps];
      float wt[Taps];
      for (int t = 0; t < Taps; ++t) {
        src[t] = base + size_t(std::clamp(i + t - pad, 0, h - 1)) * ow;
        wt[t] = float(k.weights[p][t]);
      }
      float* dst = out.data.data() + size_t(r) * ow;
      for (int x = 0; x < ow; ++x) {
        float acc = wt[0] * src[0][x];
        for (int t = 1; t < Taps; ++t) acc += wt[t] * src[t][x];
        dst[x] = acc;
      }
    }
  });
}

class ResampleSession : public ModelSession {
 public:
  ResampleSession(const ResampleKernel& k, const Device& device) : kernel_(k), device_(device) {}

  Planar run(Planar&& input, const RunContext&) override {
    if (device_.kind == Device::Kind::kCpu) return resample_cpu(kernel_, std::move(input));
    return torch_models().resample_torch(kernel_, std::move(input), device_);
  }

 private:
  ResampleKernel kernel_;
  Device device_;
};

class ResampleModel : public Model {
 public:
  ResampleModel(const std::string& kind, int scale)
      : kernel_(resample_kernel(kind, scale)), traits_(resampler_traits(kind, kernel_)) {}
  const ModelTraits& traits() const override { return traits_; }
  std::unique_ptr<ModelSession> open_session(const Device& device) const override {
    return std::make_unique<ResampleSession>(kernel_, device);
  }

 private:
  ResampleKernel kernel_;
  ModelTraits traits_;
};

}  // namespace

ModelTraits resampler_traits(const std::string& kind, const ResampleKernel& kernel) {
  ModelTraits traits;
  traits.name = kind;
  traits.in_channels = 3;
  traits.out_channels = 3;
  traits.scale_num = kernel.scale;
  traits.scale_den = 1;
  traits.halo = std::max(-kernel.offset, kernel.taps - 1 + kernel.offset);
  traits.halo_exact = true;
  traits.causal_state = false;
  traits.precisions = {Precision::kFloat32};
  return traits;
}

double resample_weight(const std::string& kind, double x) {
  const double ax = std::fabs(x);
  if (kind == "lanczos") {
    constexpr double a = 3.0;
    return ax < a ? sinc(x) * sinc(x / a) : 0.0;
  }
  // Keys' cubic convolution with a = -0.5 (Catmull-Rom), as PIL and swscale's default bicubic
  // family use for upscaling.
  constexpr double a = -0.5;
  if (ax <= 1.0) return ((a + 2.0) * ax - (a + 3.0)) * ax * ax + 1.0;
  if (ax < 2.0) return ((a * ax - 5.0 * a) * ax + 8.0 * a) * ax - 4.0 * a;
  return 0.0;
}

ResampleKernel resample_kernel(const std::string& kind, int scale) {
  if (kind != "lanczos" && kind != "bicubic") {
    throw ModelError("unknown resampler '" + kind + "'");
  }
  if (scale < 2 || scale > 4) throw ModelError(kind + ": scale must be 2, 3 or 4");
  const int radius = kernel_radius(kind);
  ResampleKernel k;
  k.scale = scale;
  k.offset = -radius;
  k.taps = 2 * radius + 1;
  k.weights.assign(scale, std::vector<double>(k.taps, 0.0));
  for (int p = 0; p < scale; ++p) {
    // Output pixel x = scale*i + p has its centre at input coordinate i + d.
    const double d = (p + 0.5) / scale - 0.5;
    const int base = int(std::floor(d));
    double sum = 0;
    for (int j = base - radius + 1; j <= base + radius; ++j) {
      const double w = resample_weight(kind, d - j);
      k.weights[p][j - k.offset] = w;
      sum += w;
    }
    for (double& w : k.weights[p]) w /= sum;
  }
  return k;
}

Planar resample_cpu(const ResampleKernel& kernel, Planar&& input) {
  Planar out(input.channels, input.frames, input.height * kernel.scale, input.width * kernel.scale);
  if (kernel.taps == 7) {
    resample_planes<7>(kernel, input, out);
  } else if (kernel.taps == 5) {
    resample_planes<5>(kernel, input, out);
  } else {
    throw ModelError("resample: unsupported kernel size");
  }
  return out;
}

std::unique_ptr<Model> make_resampler(const ModelConfig& config) {
  return std::make_unique<ResampleModel>(config.kind, config.scale);
}

}  // namespace wm::models
