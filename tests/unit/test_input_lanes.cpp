// How many inputs of a batch a GPU runs at once when `parallel.inputs` is left to auto
// (scheduler/input_lanes.h): by the measured peak memory of one lane, the host's cores and a cap.
#include <gtest/gtest.h>

#include <cstdint>

#include "scheduler/input_lanes.h"

namespace wm::sched {
namespace {

constexpr int64_t kGiB = int64_t(1) << 30;

TEST(InputLanes, MemoryBoundsTheLanesOfADevice) {
  // 80 GiB usable, one lane peaked at 30 GiB: 0.8 · 80 / 30 = 2.1 → 2.
  EXPECT_EQ(lanes_per_device(80 * kGiB, 30 * kGiB, 1, 64, 1), 2);
  // The same need measured over two lanes (60 GiB peak): still 2.
  EXPECT_EQ(lanes_per_device(80 * kGiB, 60 * kGiB, 2, 64, 1), 2);
  // A model that needs more than the share of memory: no second lane.
  EXPECT_EQ(lanes_per_device(16 * kGiB, 14 * kGiB, 1, 64, 1), 1);
}

TEST(InputLanes, CoresAndTheCapBoundASmallModel) {
  // 1 GiB per lane on 139 GiB: memory would allow 111.
  EXPECT_EQ(lanes_per_device(139 * kGiB, kGiB, 1, 16, 1), 16 / kCoresPerLane);
  EXPECT_EQ(lanes_per_device(139 * kGiB, kGiB, 1, 8, 1), 8 / kCoresPerLane);
  EXPECT_EQ(lanes_per_device(139 * kGiB, kGiB, 1, 128, 1), kMaxLanesPerDevice);
  // Cores are shared by the devices: 32 cores over 4 GPUs give each 2 lanes.
  EXPECT_EQ(lanes_per_device(139 * kGiB, kGiB, 1, 32, 4), 32 / (4 * kCoresPerLane));
}

TEST(InputLanes, NeverFewerThanRunningAndUnknownMemoryKeepsThem) {
  EXPECT_EQ(lanes_per_device(16 * kGiB, 15 * kGiB, 3, 64, 1), 3);  // never takes lanes away
  EXPECT_EQ(lanes_per_device(139 * kGiB, kGiB, 1, 2, 1), 1);       // 2 cores: no extra lane
  EXPECT_EQ(lanes_per_device(-1, -1, 1, 64, 1), 1);                // the CPU
  EXPECT_EQ(lanes_per_device(80 * kGiB, 0, 2, 64, 1), 2);          // nothing measured
  EXPECT_EQ(lanes_per_device(80 * kGiB, kGiB, 0, 64, 1), kMaxLanesPerDevice);
  // No memory bound at all (how the runner asks whether the cores allow a second lane).
  EXPECT_EQ(lanes_per_device(INT64_MAX, 1, 1, 16, 1), 16 / kCoresPerLane);
  EXPECT_EQ(lanes_per_device(INT64_MAX, 1, 1, 4, 1), 1);
}

TEST(InputLanes, BalancedRoundsUseNoMoreLanesThanTheRoundsNeed) {
  // Within the cap, one lane per input.
  EXPECT_EQ(balanced_lanes(8, 8, 2), 8);
  EXPECT_EQ(balanced_lanes(3, 8, 2), 3);
  // Past the cap: the rounds stay ceil(inputs / cap), the lanes as few as that allows.
  EXPECT_EQ(balanced_lanes(8, 7, 2), 4);    // 2 rounds of 4, not 7 + 1
  EXPECT_EQ(balanced_lanes(9, 8, 2), 5);    // 2 rounds: 5 + 4
  EXPECT_EQ(balanced_lanes(9, 4, 1), 3);    // 3 rounds of 3, not 4 + 4 + 1
  EXPECT_EQ(balanced_lanes(16, 8, 2), 8);   // whole rounds already
  EXPECT_EQ(balanced_lanes(17, 8, 2), 6);   // 3 rounds: 6 + 6 + 5
  EXPECT_EQ(balanced_lanes(100, 4, 1), 4);  // 25 rounds either way
  // Never fewer lanes than run now; nothing left: the lanes as they are; no cap: one lane.
  EXPECT_EQ(balanced_lanes(8, 7, 5), 5);
  EXPECT_EQ(balanced_lanes(0, 8, 3), 3);
  EXPECT_EQ(balanced_lanes(5, 0, 1), 1);
  // Every answer keeps the cap's rounds, within the cap, and one lane fewer would need a round
  // more.
  for (int64_t inputs = 1; inputs <= 40; ++inputs) {
    for (int cap = 1; cap <= 9; ++cap) {
      const int lanes = balanced_lanes(inputs, cap, 1);
      const int64_t rounds = (inputs + cap - 1) / cap;
      EXPECT_LE(lanes, cap);
      EXPECT_EQ((inputs + lanes - 1) / lanes, rounds) << inputs << " inputs, cap " << cap;
      if (lanes > 1) {
        EXPECT_GT((inputs + lanes - 2) / (lanes - 1), rounds) << inputs << " inputs, cap " << cap;
      }
    }
  }
}

TEST(InputLanes, PlannedLanesAreWhatTheCoresAllowForTheBatch) {
  // One H200 with 16 cores: 4 lanes for 8 inputs; two with 32 cores: 8 lanes, one round.
  EXPECT_EQ(planned_lanes(8, 16, 1, 1), 16 / kCoresPerLane);
  EXPECT_EQ(planned_lanes(8, 32, 2, 2), 8);
  // Balanced rounds: 9 inputs on room for 8 lanes take 5 (two rounds), not 8.
  EXPECT_EQ(planned_lanes(9, 32, 2, 2), 5);
  // Fewer inputs than room: one lane each; too few cores for a second lane: what runs now.
  EXPECT_EQ(planned_lanes(3, 64, 1, 1), 3);
  EXPECT_EQ(planned_lanes(8, 4, 1, 1), 1);
  EXPECT_EQ(planned_lanes(8, 4, 2, 2), 2);
}

}  // namespace
}  // namespace wm::sched
