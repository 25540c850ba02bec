#include "src/geometry.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "src/models/registry.h"

namespace wm {
namespace {

int round_down(int v, int m) { return v / m * m; }
int round_up(int v, int m) { return (v + m - 1) / m * m; }

}  // namespace

AxisPlan plan_axis(int length, int tile, int overlap, int halo, int multiple) {
  if (length <= 0) throw std::invalid_argument("frame size must be positive");
  if (multiple < 1 || length % multiple != 0) {
    throw std::invalid_argument("frame size " + std::to_string(length) + " is not a multiple of " +
                                std::to_string(multiple));
  }
  AxisPlan plan;
  plan.length = length;
  if (tile <= 0 || tile >= length) {
    plan.regions.push_back({0, length});
    plan.windows.push_back({0, length});
    return plan;
  }
  tile = std::max(multiple, round_down(tile, multiple));
  overlap = round_up(std::max(overlap, 0), multiple);
  if (overlap >= tile) {
    throw std::invalid_argument("tile overlap " + std::to_string(overlap) +
                                " must be smaller than the tile size " + std::to_string(tile));
  }
  const int step = tile - overlap;
  for (int begin = 0;; begin += step) {
    if (begin + tile >= length) {
      // The last tile ends at the frame edge; it may overlap its neighbour by more.
      plan.regions.push_back({std::max(0, length - tile), length});
      break;
    }
    plan.regions.push_back({begin, begin + tile});
  }
  const int grow = round_up(std::max(halo, 0), multiple);
  for (const Span& r : plan.regions) {
    plan.windows.push_back({std::max(0, r.begin - grow), std::min(length, r.end + grow)});
  }
  return plan;
}

std::vector<std::vector<float>> blend_weights(const AxisPlan& axis, int scale_num, int scale_den,
                                              bool feather) {
  const size_t n = axis.regions.size();
  auto to_out = [&](int v) { return int(int64_t(v) * scale_num / scale_den); };
  const int out_length = to_out(axis.length);
  // Raw ramps in output pixels: rising across the overlap with the previous region, falling
  // across the overlap with the next one. Pixel centres keep the ramp strictly inside (0, 1].
  std::vector<std::vector<double>> raw(n);
  for (size_t i = 0; i < n; ++i) {
    const int begin = to_out(axis.regions[i].begin), end = to_out(axis.regions[i].end);
    raw[i].assign(end - begin, 1.0);
    if (!feather) {
      // Hard seams in the middle of each shared part.
      if (i > 0) {
        const int cut = (begin + to_out(axis.regions[i - 1].end)) / 2;
        for (int x = begin; x < cut; ++x) raw[i][x - begin] = 0.0;
      }
      if (i + 1 < n) {
        const int cut = (to_out(axis.regions[i + 1].begin) + end) / 2;
        for (int x = cut; x < end; ++x) raw[i][x - begin] = 0.0;
      }
      continue;
    }
    if (i > 0) {
      const int shared = to_out(axis.regions[i - 1].end) - begin;
      for (int x = 0; x < shared; ++x) raw[i][x] = std::min(raw[i][x], (x + 0.5) / shared);
    }
    if (i + 1 < n) {
      const int shared = end - to_out(axis.regions[i + 1].begin);
      for (int x = 0; x < shared; ++x) {
        double& w = raw[i][end - begin - 1 - x];
        w = std::min(w, (x + 0.5) / shared);
      }
    }
  }
  std::vector<double> total(out_length, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const int begin = to_out(axis.regions[i].begin);
    for (size_t x = 0; x < raw[i].size(); ++x) total[begin + x] += raw[i][x];
  }
  std::vector<std::vector<float>> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int begin = to_out(axis.regions[i].begin);
    out[i].resize(raw[i].size());
    for (size_t x = 0; x < raw[i].size(); ++x) {
      out[i][x] = feather ? float(raw[i][x] / total[begin + x]) : float(raw[i][x]);
    }
  }
  return out;
}

TilePlan plan_tiles(int width, int height, int tile_width, int tile_height, int overlap, int halo,
                    int scale_num, int scale_den, int multiple, bool feather) {
  TilePlan plan;
  plan.width = width;
  plan.height = height;
  plan.scale_num = scale_num;
  plan.scale_den = scale_den;
  plan.columns = plan_axis(width, tile_width, overlap, halo, multiple);
  plan.rows = plan_axis(height, tile_height, overlap, halo, multiple);
  plan.column_weights = blend_weights(plan.columns, scale_num, scale_den, feather);
  plan.row_weights = blend_weights(plan.rows, scale_num, scale_den, feather);
  return plan;
}

TileRect TilePlan::tile(int index) const {
  TileRect t;
  const int cols = int(columns.regions.size());
  t.index = index;
  t.column = index % cols;
  t.row = index / cols;
  t.x_region = columns.regions[t.column];
  t.x_window = columns.windows[t.column];
  t.y_region = rows.regions[t.row];
  t.y_window = rows.windows[t.row];
  return t;
}

int auto_decode_slice_frames(int requested, const std::string& kind, bool gpu) {
  if (requested > 0) return requested;
  const ModelKind* k = find_model_kind(kind);
  return k && k->gpu_decode_slice_frames > 0 && gpu ? k->gpu_decode_slice_frames
                                                    : auto_slice_frames(0, true, 0);
}

int auto_slice_frames(int requested, bool temporal, int64_t output_frame_bytes) {
  if (requested > 0) return requested;
  if (temporal) return 4;
  constexpr int64_t kBudget = int64_t(64) << 20;
  const int64_t fit = output_frame_bytes > 0 ? kBudget / output_frame_bytes : 8;
  return int(std::clamp<int64_t>(fit, 1, 8));
}

SliceRule make_slice_rule(int requested, int group, int offset) {
  SliceRule rule;
  rule.group = std::max(group, 1);
  rule.offset = std::max(offset, 0);
  const int groups = std::max(1, requested / rule.group);
  rule.slice_frames = groups * rule.group;
  rule.first_frames = rule.offset + rule.slice_frames;
  return rule;
}

int64_t pad_frames(int64_t frames, int group, int offset) {
  if (group <= 1) return 0;
  if (frames <= offset) return offset - frames;
  const int64_t rest = (frames - offset) % group;
  return rest == 0 ? 0 : group - rest;
}

std::vector<SliceRange> plan_slices(int64_t frames, const SliceRule& rule) {
  std::vector<SliceRange> out;
  int64_t first = 0;
  for (int64_t index = 0; first < frames; ++index) {
    const int64_t want = index == 0 ? rule.first_frames : rule.slice_frames;
    const int64_t count = std::min<int64_t>(want, frames - first);
    out.push_back({index, first, count});
    first += count;
  }
  return out;
}

}  // namespace wm
