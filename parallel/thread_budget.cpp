#include "parallel/thread_budget.h"

#include <algorithm>
#include <thread>

namespace wm::parallel {

ThreadBudget thread_budget(int cores, int lanes) {
  ThreadBudget b;
  b.cores = std::max(cores, 1);
  b.lanes = std::max(lanes, 1);
  b.lane_cores = std::max(1, b.cores / b.lanes);
  // libav's auto and TBB's default arena: one thread per core of what the lane has.
  b.decode_threads = b.lane_cores;
  b.tbb_threads = b.lane_cores;
  // The encoder: x264's frame threads wait on each other's rows and its lookahead gets a third
  // of them at veryfast, so an encoder keeps fewer cores busy than it has threads. One encoder
  // alone: x264's own auto rule, 1.5 threads per core. Several side by side (input lanes): 3 per
  // lane core, at most what x264's auto gives one encoder of the whole host. The encoders alone
  // on a batch's own 4K frames, lanes of 4 cores (docs/gpu.md): two H200s (32 cores, 8 lanes)
  // 4 / 6 / 12 / auto threads 52.9 / 79.1 / 93.3 / 79.5 fps; one H200 (16 cores, 4 lanes)
  // 50.3 / 61.0 / 62.2 / 63.4 and 39.7 / 48.4 / 54.4 / 51.0; the two-GPU job 76.9 fps at 6
  // threads, 84.2 at 12.
  b.encoder_threads = std::max(1, std::min(3 * b.lane_cores, 3 * b.cores / 2));
  // The device frame path decodes the model's input (~1/4 of the output's pixels or less): a
  // quarter of the lane's cores, 1 to 8 threads, is more than the device takes
  // (scheduler/upscale_device.cpp gives the encoders the rest). Two per lane of 4 cores did not
  // shorten a batch's start (one H200, 8 x 24 frames, 2026-12-01: 0.854 and 0.858 of the encode
  // ceiling against 0.845 and 0.869 with one, medians of 3 rounds): decoding took 0.49 s instead
  // of 2.59 (summed over the inputs), but the lanes waited as long on their slices from the
  // device (1.97 s against 1.94), which all of them start on at once.
  b.device_decode_threads = std::clamp(b.lane_cores / 4, 1, 8);
  // FFmpeg 5.1's swscale slice threads broke some conversions (io/video_reader.h): one thread.
  b.convert_threads = 1;
  b.torch_threads = b.cores;
  return b;
}

std::string ThreadBudget::text() const {
  return std::to_string(cores) + " cores, " + std::to_string(lanes) +
         (lanes == 1 ? " lane" : " lanes") + " of " + std::to_string(lane_cores) + ": decode " +
         std::to_string(decode_threads) + " (device path " + std::to_string(device_decode_threads) +
         "), convert " + std::to_string(convert_threads) + ", encode " +
         std::to_string(encoder_threads) + ", tbb " + std::to_string(tbb_threads) + ", torch " +
         std::to_string(torch_threads);
}

int host_cores() { return std::max(1, int(std::thread::hardware_concurrency())); }

}  // namespace wm::parallel
