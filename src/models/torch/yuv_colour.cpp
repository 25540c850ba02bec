#include "src/models/torch/yuv_colour.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/base/error.h"

namespace wm::models {
namespace {

at::Tensor index_tensor(const std::vector<int64_t>& values, at::Device device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device);
}

// The ordered-dither thresholds of an 8×8 Bayer matrix, (m + 1/2) / 64 − 1/2, tiled over
// rows × cols.
at::Tensor bayer_plane(int rows, int cols, at::Device device) {
  // The 8×8 Bayer index matrix, built from the 2×2 one.
  int m[8][8];
  m[0][0] = 0;
  for (int size = 1; size < 8; size *= 2) {
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        const int v = 4 * m[y][x];
        m[y][x] = v;
        m[y][x + size] = v + 2;
        m[y + size][x] = v + 3;
        m[y + size][x + size] = v + 1;
      }
    }
  }
  std::vector<float> tile(64);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) tile[size_t(y * 8 + x)] = (float(m[y][x]) + 0.5f) / 64.0f - 0.5f;
  }
  const at::Tensor t = at::tensor(tile, at::TensorOptions().dtype(at::kFloat)).view({8, 8});
  const int64_t ry = (rows + 7) / 8, rx = (cols + 7) / 8;
  return t.repeat({ry, rx}).narrow(0, 0, rows).narrow(1, 0, cols).contiguous().to(device);
}

}  // namespace

YuvConverter::YuvConverter(const YuvFormat& format, size_t align, at::Device device)
    : format_(format), layout_(yuv_layout(format, align)), device_(device) {
  if (format.depth < 8 || format.depth > 16 || format.depth + format.sample_shift > 16 ||
      format.shift_x < 0 || format.shift_x > 1 || format.shift_y < 0 || format.shift_y > 1 ||
      format.width <= 0 || format.height <= 0) {
    throw Error("YuvConverter: unsupported format " + format.describe(), kExitSoftware);
  }
  // Chroma sample k of a subsampled axis sits at luma coordinate 2k + siting.
  auto upsample = [&](int luma, int chroma, double siting, Upsample& out) {
    std::vector<int64_t> first(static_cast<size_t>(luma)), second(static_cast<size_t>(luma));
    std::vector<float> weight(static_cast<size_t>(luma));
    for (int x = 0; x < luma; ++x) {
      const double u = (x - siting) / 2.0;
      const double i0 = std::floor(u);
      weight[size_t(x)] = float(u - i0);
      first[size_t(x)] = std::clamp<int64_t>(int64_t(i0), 0, chroma - 1);
      second[size_t(x)] = std::clamp<int64_t>(int64_t(i0) + 1, 0, chroma - 1);
    }
    out.first = index_tensor(first, device);
    out.second = index_tensor(second, device);
    out.weight = at::tensor(weight, at::TensorOptions().dtype(at::kFloat)).to(device);
  };
  auto downsample = [&](int luma, int chroma, double siting, Downsample& out) {
    // Taps j (luma offsets from 2k) with |j − siting| < 2, weighted 1 − |j − siting| / 2.
    double sum = 0;
    std::vector<int> offsets;
    std::vector<double> weights;
    for (int j = -2; j <= 3; ++j) {
      const double w = 1.0 - std::fabs(j - siting) / 2.0;
      if (w <= 0) continue;
      offsets.push_back(j);
      weights.push_back(w);
      sum += w;
    }
    for (size_t i = 0; i < offsets.size(); ++i) {
      std::vector<int64_t> index(static_cast<size_t>(chroma));
      for (int k = 0; k < chroma; ++k) {
        index[size_t(k)] = std::clamp<int64_t>(2 * int64_t(k) + offsets[i], 0, luma - 1);
      }
      out.taps.push_back(index_tensor(index, device));
      out.weights.push_back(float(weights[i] / sum));
    }
  };
  if (format.shift_x) {
    upsample(format.width, format.chroma_width(), format.chroma_x, up_x_);
    downsample(format.width, format.chroma_width(), format.chroma_x, down_x_);
  }
  if (format.shift_y) {
    upsample(format.height, format.chroma_height(), format.chroma_y, up_y_);
    downsample(format.height, format.chroma_height(), format.chroma_y, down_y_);
  }
  if (format.depth < 10) {
    dither_luma_ = bayer_plane(format.height, format.width, device);
    // Chroma gets the pattern turned by a quarter, so its thresholds do not line up with luma's.
    dither_chroma_ = bayer_plane(format.chroma_width(), format.chroma_height(), device).t();
  }
}

at::Tensor YuvConverter::plane_samples(const at::Tensor& packed, int p) const {
  const int64_t frames = packed.size(0);
  const int64_t rows = format_.plane_rows(p), samples = format_.plane_row_samples(p);
  const int64_t stride = int64_t(layout_.stride[p]);
  const at::Tensor bytes = packed.narrow(1, int64_t(layout_.offset[p]), rows * stride)
                               .view({frames, rows, stride})
                               .narrow(2, 0, samples * format_.bytes_per_sample());
  at::Tensor v;
  if (format_.bytes_per_sample() == 1) {
    v = bytes.to(at::kFloat);
  } else {
    // Little-endian 16-bit samples from their two bytes (no dtype views: LibTorch 1.13 has none
    // for unsigned 16-bit).
    const at::Tensor low = bytes.slice(2, 0, samples * 2, 2).to(at::kFloat);
    const at::Tensor high = bytes.slice(2, 1, samples * 2, 2).to(at::kFloat);
    v = high * 256.0f + low;
  }
  if (format_.sample_shift) v = at::floor(v / float(1 << format_.sample_shift));
  return v;  // [T, rows, samples]
}

at::Tensor YuvConverter::upsample(const at::Tensor& c) const {
  // c [T, Hc, Wc] → [T, H, W]
  at::Tensor out = c;
  if (format_.shift_x) {
    out = out.index_select(2, up_x_.first) * (1.0f - up_x_.weight) +
          out.index_select(2, up_x_.second) * up_x_.weight;
  }
  if (format_.shift_y) {
    const at::Tensor w = up_y_.weight.view({-1, 1});
    out = out.index_select(1, up_y_.first) * (1.0f - w) + out.index_select(1, up_y_.second) * w;
  }
  return out;
}

at::Tensor YuvConverter::to_rgb(const at::Tensor& packed, at::ScalarType dtype) const {
  if (packed.dim() != 2 || packed.scalar_type() != at::kByte ||
      packed.size(1) != int64_t(layout_.frame_bytes)) {
    throw Error("YuvConverter: packed frames of " + std::to_string(layout_.frame_bytes) +
                    " bytes expected for " + format_.describe(),
                kExitSoftware);
  }
  const float s = float(1 << (format_.depth - 8));
  const float max = float((1 << format_.depth) - 1);
  const at::Tensor y_samples = plane_samples(packed, 0);
  at::Tensor u_samples, v_samples;
  if (format_.semi_planar) {
    const at::Tensor uv = plane_samples(packed, 1);
    const int64_t n = uv.size(2);
    u_samples = uv.slice(2, 0, n, 2);
    v_samples = uv.slice(2, 1, n, 2);
  } else {
    u_samples = plane_samples(packed, 1);
    v_samples = plane_samples(packed, 2);
  }
  at::Tensor y, u, v;
  if (format_.full_range) {
    y = y_samples / max;
    u = (u_samples - float(1 << (format_.depth - 1))) / max;
    v = (v_samples - float(1 << (format_.depth - 1))) / max;
  } else {
    y = (y_samples - 16.0f * s) / (219.0f * s);
    u = (u_samples - 128.0f * s) / (224.0f * s);
    v = (v_samples - 128.0f * s) / (224.0f * s);
  }
  u = upsample(u);
  v = upsample(v);
  double kr = 0, kb = 0;
  yuv_coefficients(format_.matrix, kr, kb);
  const double kg = 1.0 - kr - kb;
  const at::Tensor r = y + float(2.0 * (1.0 - kr)) * v;
  const at::Tensor b = y + float(2.0 * (1.0 - kb)) * u;
  const at::Tensor g =
      y - float(2.0 * kb * (1.0 - kb) / kg) * u - float(2.0 * kr * (1.0 - kr) / kg) * v;
  return at::stack({r, g, b}, 1).clamp_(0.0, 1.0).to(dtype);
}

at::Tensor YuvConverter::downsample(const at::Tensor& c) const {
  // c [T, H, W] → [T, Hc, Wc]
  at::Tensor out = c;
  if (format_.shift_x) {
    at::Tensor sum;
    for (size_t i = 0; i < down_x_.taps.size(); ++i) {
      const at::Tensor t = out.index_select(2, down_x_.taps[i]) * down_x_.weights[i];
      sum = i == 0 ? t : sum + t;
    }
    out = sum;
  }
  if (format_.shift_y) {
    at::Tensor sum;
    for (size_t i = 0; i < down_y_.taps.size(); ++i) {
      const at::Tensor t = out.index_select(1, down_y_.taps[i]) * down_y_.weights[i];
      sum = i == 0 ? t : sum + t;
    }
    out = sum;
  }
  return out;
}

at::Tensor YuvConverter::quantise(const at::Tensor& v, bool luma, bool dither) const {
  const float s = float(1 << (format_.depth - 8));
  const float max = float((1 << format_.depth) - 1);
  float mul = 0, offset = 0;
  if (format_.full_range) {
    mul = max;
    offset = luma ? 0.0f : float(1 << (format_.depth - 1));
  } else {
    mul = (luma ? 219.0f : 224.0f) * s;
    offset = (luma ? 16.0f : 128.0f) * s;
  }
  at::Tensor q = v * mul + (offset + 0.5f);
  if (dither && dither_luma_.defined()) q = q + (luma ? dither_luma_ : dither_chroma_);
  return at::floor(q).clamp_(0.0, double(max));
}

void YuvConverter::store_plane(at::Tensor& packed, int p, const at::Tensor& samples) const {
  // samples [T, rows, row_samples], integer values of the format's depth.
  const int64_t frames = packed.size(0);
  const int64_t rows = format_.plane_rows(p), n = format_.plane_row_samples(p);
  const int64_t stride = int64_t(layout_.stride[p]);
  at::Tensor dst = packed.narrow(1, int64_t(layout_.offset[p]), rows * stride)
                       .view({frames, rows, stride})
                       .narrow(2, 0, n * format_.bytes_per_sample());
  at::Tensor v = samples;
  if (format_.sample_shift) v = v * float(1 << format_.sample_shift);
  if (format_.bytes_per_sample() == 1) {
    dst.copy_(v.to(at::kByte));
    return;
  }
  const at::Tensor i = v.to(at::kInt);
  const at::Tensor low = at::bitwise_and(i, 255);
  const at::Tensor high = at::div(i, 256, "floor");
  dst.copy_(at::stack({low, high}, -1).view({frames, rows, n * 2}).to(at::kByte));
}

at::Tensor YuvConverter::from_rgb(const at::Tensor& rgb, bool dither) const {
  if (rgb.dim() != 4 || rgb.size(1) != 3 || rgb.size(2) != format_.height ||
      rgb.size(3) != format_.width) {
    throw Error("YuvConverter: RGB frames of " + std::to_string(format_.width) + "x" +
                    std::to_string(format_.height) + " expected",
                kExitSoftware);
  }
  const at::Tensor x = rgb.to(at::kFloat).clamp(0.0, 1.0);
  const at::Tensor r = x.select(1, 0), g = x.select(1, 1), b = x.select(1, 2);
  double kr = 0, kb = 0;
  yuv_coefficients(format_.matrix, kr, kb);
  const double kg = 1.0 - kr - kb;
  const at::Tensor y = float(kr) * r + float(kg) * g + float(kb) * b;
  const at::Tensor u = downsample((b - y) * float(0.5 / (1.0 - kb)));
  const at::Tensor v = downsample((r - y) * float(0.5 / (1.0 - kr)));
  at::Tensor packed = at::empty({rgb.size(0), int64_t(layout_.frame_bytes)},
                                at::TensorOptions().dtype(at::kByte).device(rgb.device()));
  store_plane(packed, 0, quantise(y, true, dither));
  const at::Tensor qu = quantise(u, false, dither), qv = quantise(v, false, dither);
  if (format_.semi_planar) {
    store_plane(packed, 1, at::stack({qu, qv}, -1).view({qu.size(0), qu.size(1), qu.size(2) * 2}));
  } else {
    store_plane(packed, 1, qu);
    store_plane(packed, 2, qv);
  }
  return packed;
}

}  // namespace wm::models
