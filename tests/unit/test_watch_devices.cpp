// watch/device_share.h: how max_parallel watch workers share the job's GPUs.
#include <gtest/gtest.h>

#include <map>

#include "watch/device_share.h"

namespace wm::watch {
namespace {

using Ids = std::vector<int>;

TEST(WatchDevices, FewerWorkersThanGpusUseEveryGpuOnce) {
  const Ids gpus = {0, 1, 2, 3, 4};
  EXPECT_EQ(worker_devices(gpus, 0, 2), (Ids{0, 2, 4}));
  EXPECT_EQ(worker_devices(gpus, 1, 2), (Ids{1, 3}));
  // Every GPU goes to exactly one worker, for any worker count below the GPU count.
  for (int workers = 1; workers < 5; ++workers) {
    std::map<int, int> uses;
    for (int w = 0; w < workers; ++w) {
      const Ids mine = worker_devices(gpus, w, workers);
      EXPECT_FALSE(mine.empty()) << w << " of " << workers;
      for (int id : mine) ++uses[id];
    }
    EXPECT_EQ(uses.size(), gpus.size()) << workers << " workers";
    for (const auto& [id, n] : uses) EXPECT_EQ(n, 1) << "GPU " << id << ", " << workers;
  }
}

TEST(WatchDevices, MoreWorkersThanGpusShareThemRoundRobin) {
  const Ids gpus = {2, 5};  // an explicit list: its ids, not 0..n-1
  EXPECT_EQ(worker_devices(gpus, 0, 3), (Ids{2}));
  EXPECT_EQ(worker_devices(gpus, 1, 3), (Ids{5}));
  EXPECT_EQ(worker_devices(gpus, 2, 3), (Ids{2}));
  EXPECT_EQ(worker_devices(gpus, 1, 2), (Ids{5}));
}

TEST(WatchDevices, NoGpusGiveNone) {
  EXPECT_TRUE(worker_devices({}, 0, 2).empty());
  EXPECT_EQ(worker_devices({7}, 3, 4), (Ids{7}));
}

}  // namespace
}  // namespace wm::watch
