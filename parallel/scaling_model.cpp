#include "parallel/scaling_model.h"

#include <algorithm>
#include <cstdio>

#include "parallel/sequence_parallel.h"

namespace wm::parallel {

Link nvlink_link() { return {"nvlink", 450e9, 10e-6}; }
Link pcie5_link() { return {"pcie5", 55e9, 20e-6}; }
Link device_memory_link() { return {"device memory", 1.5e12, 5e-6}; }
Link host_memory_link() { return {"host memory", 10e9, 5e-6}; }

double predicted_seconds(const std::vector<RankLoad>& ranks, const Link& link, bool overlapped) {
  double most = 0;
  for (const RankLoad& r : ranks) {
    const double transfer = r.bytes / link.bytes_per_second + r.messages * link.latency_seconds;
    most = std::max(
        most, overlapped ? std::max(r.compute_seconds, transfer) : r.compute_seconds + transfer);
  }
  return most;
}

namespace {

// Rough compute rates per rank (only the ratio of compute to transfer matters for the choice):
// a GPU's bf16 convolutions (an H200 decodes Wan2.1 at ~410 TFLOP/s), 8 CPU threads.
constexpr double kGpuFlops = 3e14;
constexpr double kCpuFlops = 3e11;

std::string speedup_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f×", x);
  return buf;
}

}  // namespace

SplitPrediction predict_split(const SliceFacts& s, const SplitCosts& c) {
  SplitPrediction p;
  const int ranks = std::max(1, s.ranks);
  const bool fits_rows = s.rows >= 2 * ranks;
  if (c.flops_per_pixel <= 0) {
    p.rows = choose_split(s.frames, s.rows, ranks, s.kind) == SplitBy::kRows;
    p.why = std::string(p.rows ? "rows" : "time") + " (the fixed rule: the model gives no costs)";
    return p;
  }
  const Link link = s.kind == Device::Kind::kCpu ? host_memory_link()
                    : s.shared_device            ? device_memory_link()
                                                 : nvlink_link();
  const double rate = s.kind == Device::Kind::kCuda ? kGpuFlops : kCpuFlops;
  const double pixels = double(s.rows) * s.cols;
  const double frame_seconds =
      c.flops_per_pixel * pixels * double(c.spatial_factor) * c.spatial_factor / rate;
  // A clip in one slice is this slice; a longer one is mostly later slices like it (each
  // latent frame yields temporal_factor frames; the sequence's first yields one).
  const bool whole = s.first && s.last;
  const int tf = std::max(1, c.temporal_factor);
  auto yield = [&](int n, bool head) { return double(head ? 1 + tf * (n - 1) : tf * n); };
  const double one = yield(s.frames, whole) * frame_seconds;

  // Time: the parts in order, the longer ones last; every rank but a clip's last passes its
  // history on (the ring), beside its compute.
  const std::vector<int> parts = split_frames(s.frames, ranks);
  std::vector<RankLoad> time;
  for (size_t r = 0; r < parts.size(); ++r) {
    RankLoad load;
    load.compute_seconds = yield(parts[r], whole && r == 0) * frame_seconds;
    if (parts.size() > 1 && !(whole && r + 1 == parts.size())) {
      load.bytes = c.state_bytes_per_pixel * pixels;
    }
    time.push_back(load);
  }
  p.time_speedup = one / std::max(predicted_seconds(time, link, true), 1e-30);

  // Rows: the bands in order; each conv waits for the rows of the bands above and below.
  if (fits_rows) {
    const std::vector<int> bands = split_frames(s.rows, ranks);
    std::vector<RankLoad> rows;
    for (size_t r = 0; r < bands.size(); ++r) {
      const int neighbours = (r > 0 ? 1 : 0) + (r + 1 < bands.size() ? 1 : 0);
      RankLoad load;
      load.compute_seconds = one * bands[r] / double(s.rows);
      load.bytes = neighbours * c.row_bytes_per_column * s.cols * s.frames;
      load.messages = neighbours * c.row_messages;
      rows.push_back(load);
    }
    p.rows_speedup = one / std::max(predicted_seconds(rows, link, false), 1e-30);
  }
  p.rows = fits_rows && p.rows_speedup > 1.05 * p.time_speedup;
  p.why = std::string(p.rows ? "rows" : "time") + ": " + std::to_string(s.frames) +
          " latent frame" + (s.frames == 1 ? "" : "s") + " of " + std::to_string(s.rows) + "x" +
          std::to_string(s.cols) + " on " + std::to_string(ranks) + " ranks (" + link.name +
          "), predicted " + speedup_text(p.time_speedup) + " in time, " +
          (fits_rows ? speedup_text(p.rows_speedup) + " by rows"
                     : std::string("rows need 2 latent rows per rank"));
  return p;
}

}  // namespace wm::parallel
