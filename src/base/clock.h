// Wall-clock intervals, for the timings in reports and benchmarks.
#pragma once

#include <chrono>

namespace wm {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace wm
