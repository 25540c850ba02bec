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

}  // namespace
}  // namespace wm::sched
