// The host thread budget (parallel/thread_budget.h): what each host stage of an input may use, from
// the cores and the input lanes. One lane keeps what every library chose by itself before the
// budget (libav's and TBB's auto: one thread per core; the device frame path's decoder a quarter
// of the cores, 1 to 8; its encoders 1.5 per core left); lanes divide the cores (their encoders
// 3 threads per lane core).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "parallel/thread_budget.h"
#include "scheduler/tasks.h"
#include "scheduler/upscale_device.h"
#include "src/job_spec.h"

namespace wm::parallel {
namespace {

struct Expected {
  int cores, lanes;
  int lane_cores, decode, device_decode, encode, tbb;
};

TEST(ThreadBudget, CountsForOneTwoAndFourLanesOnTwoSixteenAndManyCores) {
  const Expected all[] = {
      {2, 1, 2, 2, 1, 3, 2},           {2, 2, 1, 1, 1, 3, 1},        {2, 4, 1, 1, 1, 3, 1},
      {16, 1, 16, 16, 4, 24, 16},      {16, 2, 8, 8, 2, 24, 8},      {16, 4, 4, 4, 1, 12, 4},
      {128, 1, 128, 128, 8, 192, 128}, {128, 2, 64, 64, 8, 192, 64}, {128, 4, 32, 32, 8, 96, 32},
      {32, 7, 4, 4, 1, 12, 4},         {32, 8, 4, 4, 1, 12, 4},
  };
  for (const Expected& e : all) {
    SCOPED_TRACE(std::to_string(e.cores) + " cores, " + std::to_string(e.lanes) + " lanes");
    const ThreadBudget b = thread_budget(e.cores, e.lanes);
    EXPECT_EQ(b.cores, e.cores);
    EXPECT_EQ(b.lanes, e.lanes);
    EXPECT_EQ(b.lane_cores, e.lane_cores);
    EXPECT_EQ(b.decode_threads, e.decode);
    EXPECT_EQ(b.device_decode_threads, e.device_decode);
    EXPECT_EQ(b.encoder_threads, e.encode);
    EXPECT_EQ(b.tbb_threads, e.tbb);
    EXPECT_EQ(b.convert_threads, 1);
    EXPECT_EQ(b.torch_threads, e.cores);  // one LibTorch pool per process, not divided
    // One lane: the libraries keep their own defaults (0 = libav's auto), as before the budget.
    EXPECT_EQ(b.divided(), e.lanes > 1);
    EXPECT_EQ(b.decoder_option(), e.lanes > 1 ? e.decode : 0);
    EXPECT_EQ(b.encoder_option(), e.lanes > 1 ? e.encode : 0);
  }
}

TEST(ThreadBudget, LanesNeverOversubscribeTheCoresAndNoCountIsZero) {
  for (int cores : {1, 2, 3, 5, 16, 17, 64, 128, 192}) {
    for (int lanes : {1, 2, 3, 4, 7, 8, 16, 200}) {
      SCOPED_TRACE(std::to_string(cores) + " cores, " + std::to_string(lanes) + " lanes");
      const ThreadBudget b = thread_budget(cores, lanes);
      for (int count : {b.lane_cores, b.decode_threads, b.device_decode_threads, b.convert_threads,
                        b.encoder_threads, b.tbb_threads, b.torch_threads}) {
        EXPECT_GE(count, 1);
      }
      // Each CPU-heavy stage of all lanes together: within the cores, or one thread per lane
      // when there are more lanes than cores.
      const int most = std::max(cores, lanes);
      for (int count : {b.lane_cores, b.decode_threads, b.device_decode_threads, b.tbb_threads}) {
        EXPECT_LE(count * lanes, most);
      }
      // The encoders: 3 threads per core at most, and no more each than x264's auto takes of
      // the whole host (1.5 per core).
      EXPECT_LE(b.encoder_threads * lanes, 3 * most);
      EXPECT_LE(2 * b.encoder_threads, std::max(2, 3 * std::max(cores, 1)));
      EXPECT_LE(b.device_decode_threads, 8);
    }
  }
  // Nonsense in: at least one core and one lane.
  const ThreadBudget b = thread_budget(0, 0);
  EXPECT_EQ(b.cores, 1);
  EXPECT_EQ(b.lanes, 1);
  EXPECT_EQ(b.tbb_threads, 1);
}

// The device frame path's host budget (scheduler/upscale_device.h) for one lane is the one it
// used before the thread budget: decoder clamp(cores / 4, 1, 8), encoders 1.5 per core left.
TEST(ThreadBudget, OneLaneDevicePathKeepsItsCounts) {
  for (int cores : {1, 2, 4, 16, 24, 64, 128}) {
    SCOPED_TRACE(cores);
    JobSpec job;
    const sched::HostBudget b = sched::host_budget(job, thread_budget(cores, 1), 1920, 1080);
    const int decode = std::clamp(cores / 4, 1, 8);
    const int instances = std::clamp(cores / 8, 1, 4);
    EXPECT_EQ(b.cores, cores);
    EXPECT_EQ(b.decode_threads, decode);
    EXPECT_EQ(b.instances, instances);
    EXPECT_EQ(b.encoder_threads,
              std::max(1, int(std::lround(1.5 * std::max(1, cores - decode) / instances))));
  }
  // Two lanes on 16 cores: each lane's decoder and encoder from its 8 (one encoder per lane).
  JobSpec lane;
  lane.parallel.lane_ranks = 1;
  const sched::HostBudget b = sched::host_budget(lane, thread_budget(16, 2), 1920, 1080);
  EXPECT_EQ(b.cores, 8);
  EXPECT_EQ(b.decode_threads, 2);
  EXPECT_EQ(b.instances, 1);
  EXPECT_EQ(b.encoder_threads, 9);  // 1.5 × (8 − 2)
}

// What the readers and encoders of an input are told: one lane leaves libav on its own default
// (0), as before the budget; two lanes give each its share; the job's encode.threads wins.
TEST(ThreadBudget, ReadersAndEncodersGetTheInputsShare) {
  JobSpec job;
  const std::vector<Device> cpu{Device{}};
  sched::RunOptions one;
  sched::RunOptions two;
  two.lanes = 2;
  const int share = thread_budget(host_cores(), 2).lane_cores;
  EXPECT_EQ(sched::reader_options(job, cpu, one).threads, 0);
  EXPECT_EQ(sched::reader_options(job, cpu, one).convert_threads, 1);
  EXPECT_EQ(sched::encode_settings(job.encode, cpu, one).threads, 0);
  EXPECT_EQ(sched::encode_settings(job.encode, cpu, one).convert_threads, 1);
  EXPECT_EQ(sched::reader_options(job, cpu, two).threads, share);
  EXPECT_EQ(sched::encode_settings(job.encode, cpu, two).threads,
            std::max(1, std::min(3 * share, 3 * host_cores() / 2)));
  job.encode.threads = 3;
  EXPECT_EQ(sched::encode_settings(job.encode, cpu, one).threads, 3);
  EXPECT_EQ(sched::encode_settings(job.encode, cpu, two).threads, 3);
}

}  // namespace
}  // namespace wm::parallel
