#include "scheduler/input_lanes.h"

#include <algorithm>
#include <cstdint>

namespace wm::sched {

int lanes_per_device(int64_t usable, int64_t peak, int lanes_now, int cores, int devices) {
  lanes_now = std::max(lanes_now, 1);
  if (usable <= 0 || peak <= 0) return lanes_now;
  const double per_lane = double(peak) / lanes_now;
  const int by_memory =
      int(std::min(kLaneMemoryShare * double(usable) / per_lane, double(kMaxLanesPerDevice)));
  const int by_cores = std::max(cores, 1) / (std::max(devices, 1) * kCoresPerLane);
  const int lanes = std::min({by_memory, by_cores, kMaxLanesPerDevice});
  return std::max(lanes, lanes_now);
}

int balanced_lanes(int64_t inputs, int cap, int lanes_now) {
  cap = std::max(cap, 1);
  lanes_now = std::max(lanes_now, 1);
  if (inputs <= 0) return lanes_now;
  const int64_t rounds = (inputs + cap - 1) / cap;
  const int64_t lanes = (inputs + rounds - 1) / rounds;  // <= cap
  return std::max(int(lanes), lanes_now);
}

int planned_lanes(int64_t inputs, int cores, int devices, int lanes_now) {
  devices = std::max(devices, 1);
  const int per_device = lanes_per_device(INT64_MAX, 1, 1, cores, devices);
  return balanced_lanes(inputs, per_device * devices, lanes_now);
}

}  // namespace wm::sched
