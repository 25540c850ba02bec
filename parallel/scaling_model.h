// The scaling model: how long a slice split over P ranks takes when each rank has a device of
// its own, from what each rank computes and what it sends over the link between the devices
// (NVLink, PCIe 5, or one device's own memory). Two uses:
// - wmbench prints it from measurements (each rank's compute time, taken with the ranks one
//   after another, each alone on the device; the bytes and messages each rank sent), so the
//   speed-up on P GPUs can be checked on one GPU;
// - auto (choose_split) predicts it for a time split and a row split of a sequence's first
//   slice, from the model's costs (ModelTraits::split_costs), and takes the faster.
// docs/gpu.md, "The scaling model", explains every term. Torch-free header.
#pragma once

#include <string>
#include <vector>

#include "src/model.h"

namespace wm::parallel {

// A link between two ranks' devices, each way.
struct Link {
  std::string name;
  double bytes_per_second = 0;
  double latency_seconds = 0;  // per message (a send and its receive)
};
Link nvlink_link();         // H100/H200 NVLink: ~450 GB/s each way, ~10 µs a message
Link pcie5_link();          // PCIe 5.0 x16: ~55 GB/s each way in practice, ~20 µs a message
Link device_memory_link();  // ranks sharing one GPU: a copy in its memory, ~1.5 TB/s, ~5 µs
Link host_memory_link();    // CPU ranks: a copy in host memory, ~10 GB/s, ~5 µs

// One rank's share of a run.
struct RankLoad {
  double compute_seconds = 0;  // alone on its device
  double bytes = 0;            // sent
  double messages = 0;         // sent
};

// Seconds of the run when every rank has a device of its own and sends over `link`.
// `overlapped` (a time split: each causal layer's history leaves as soon as it exists, and the
// ring keeps the receivers a layer or more behind): a rank's sends run beside its compute, so
// it takes the longer of the two. Otherwise (a row split: every 3×3 convolution waits for the
// neighbouring bands' rows) they add up.
double predicted_seconds(const std::vector<RankLoad>& ranks, const Link& link, bool overlapped);

// A sequence's first slice, as auto sees it.
struct SliceFacts {
  int frames = 0;          // latent frames of the slice
  int rows = 0, cols = 0;  // latent rows and columns
  bool first = true;       // the slice holds the sequence's frame 0
  bool last = true;        // and its last (a clip in one slice)
  int ranks = 1;
  Device::Kind kind = Device::Kind::kCpu;
  bool shared_device = false;  // the ranks share one GPU
};

// Auto's decision, with the predicted speed-ups (against one device) it was made from.
struct SplitPrediction {
  bool rows = false;  // take rows (else time)
  double time_speedup = 0, rows_speedup = 0;
  std::string why;  // one line for the log and the report
};

// Predicts both splits of `slice` for a model with `costs` and picks the faster: rows when a
// row split is faster by 5 % (images and short clips, whose frames are fewer than the ranks or
// split unevenly), time otherwise (its exchange hides behind compute). Rows need at least 2
// latent rows per rank. Without costs (flops_per_pixel 0): the fixed rule of choose_split in
// sequence_parallel.h.
SplitPrediction predict_split(const SliceFacts& slice, const SplitCosts& costs);

}  // namespace wm::parallel
