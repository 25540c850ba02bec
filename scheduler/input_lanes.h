// How many inputs of a batch one device runs at once when the job leaves `parallel.inputs` to
// auto (docs/gpu.md "Batches across devices"). A data-parallel batch of a frame-wise model on
// GPUs starts with one input per device; once an input has written kGrowAfterSlices slices (or is
// done), the device's measured peak memory says how many inputs it can hold, and further input
// lanes start (each with its own
// decoder, device worker lane and encoder, so one GPU is kept fed while its inputs' host stages
// run). Torch-free.
#pragma once

#include <cstdint>

namespace wm::sched {

constexpr int kMaxLanesPerDevice = 4;
// Slices an input of the first lanes writes before the batch may widen. Waiting for a whole input
// held a batch of long clips on one lane per device for the first clip's whole length; waiting
// for three slices still left the other lanes idle for half of a 24-frame input.
// A frame-wise model's slices are alike, so the first one written shows a lane's memory but for
// the slices in flight behind it (upload, model, download of the next ones): its peak counts
// kFirstSlicePeakMargin times.
constexpr int kGrowAfterSlices = 1;
constexpr double kFirstSlicePeakMargin = 2.0;
// Host cores each lane of a device should have (its decoder and encoder run there).
constexpr int kCoresPerLane = 4;
// The share of a device's usable memory the lanes may plan to fill.
constexpr double kLaneMemoryShare = 0.8;

// Lanes one device runs at once: its usable memory over the measured need of one lane
// (peak / lanes_now), times kLaneMemoryShare, at most kMaxLanesPerDevice and cores / (devices ·
// kCoresPerLane); never fewer than lanes_now (>= 1). usable or peak unknown (< 0, the CPU) or 0:
// lanes_now.
int lanes_per_device(int64_t usable, int64_t peak, int lanes_now, int cores, int devices);

// Lanes for `inputs` inputs still to run (started or not) with room for at most `cap` lanes: as
// few as keep the rounds (inputs a lane runs one after another) at ceil(inputs / cap); never
// fewer than `lanes_now`. Eight inputs on a cap of 7 lanes give 4 lanes of two rounds each, not 7
// lanes and a second round with one input alone, and each lane has more of the host's cores for
// its decoder and encoder (two H200s, 8 × 96 frames: 7 fixed lanes 38 fps, 8 lanes 62). Lanes
// take inputs as they free up, so an uneven count of lanes per device evens out on the devices.
int balanced_lanes(int64_t inputs, int cap, int lanes_now);

// The lanes a growing batch of `inputs` inputs is planned to reach on `devices` devices and
// `cores` host cores, before any memory is measured: balanced_lanes over what the cores allow
// (lanes_per_device without a memory bound), never fewer than `lanes_now`. The batch's first
// inputs take their host threads (encoder, decoder) for that many lanes, not for the lanes
// running when they start: an encoder's threads are fixed when it opens, and first inputs
// opened with the whole host finished long before the others, whose encoders could not take
// the cores freed then (two H200s, 8 × 96 frames: the first two done at 6.5 s, the batch at 11.5).
int planned_lanes(int64_t inputs, int cores, int devices, int lanes_now);

}  // namespace wm::sched
