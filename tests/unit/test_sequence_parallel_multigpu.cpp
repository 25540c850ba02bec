// Sequence parallelism over two GPUs (one rank each, in-process exchange between devices) equals
// one rank within the golden tolerance. Skipped when fewer than 2 GPUs are visible.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>

#include "tests/unit/sequence_parallel_gpu.h"

namespace {

TEST(SequenceParallelMultiGpu, TwoGpusEqualOneRank) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const wm::Device gpu0{wm::Device::Kind::kCuda, 0}, gpu1{wm::Device::Kind::kCuda, 1};
  const double err = wm::test::ranks_vs_one_rank(wm::Precision::kFloat32, {gpu0, gpu1}, {4, 5});
  std::cout << "[ ranks    ] cuda fp32 ranks on GPUs 0 and 1: max diff " << err << "\n";
  EXPECT_LE(err, 1e-4);
}

// A row split over two GPUs: every conv's halo rows cross between the devices (the copy engines,
// on the receiver's stream; the message's channels-last rows into the receiver's layout).
TEST(SequenceParallelMultiGpu, TwoBandsOnTwoGpusEqualOneRank) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const wm::Device gpu0{wm::Device::Kind::kCuda, 0}, gpu1{wm::Device::Kind::kCuda, 1};
  for (const std::vector<int>& slices : {std::vector<int>{4, 5}, std::vector<int>{1}}) {
    const double err = wm::test::ranks_vs_one_rank(wm::Precision::kFloat32, {gpu0, gpu1}, slices,
                                                   false, wm::parallel::SplitBy::kRows);
    std::cout << "[ bands    ] cuda fp32 2 spatial ranks on GPUs 0 and 1, " << slices.size()
              << " slices: max diff " << err << "\n";
    EXPECT_LE(err, 1e-4);
  }
}

}  // namespace

namespace {

// The same over NCCL (one communicator per GPU, made once per process), when the build has it.
TEST(SequenceParallelMultiGpu, TwoGpusOverNcclEqualOneRank) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  if (!wm::parallel::nccl_available()) GTEST_SKIP() << "built without WMBATCH_WITH_NCCL";
  const wm::Device gpu0{wm::Device::Kind::kCuda, 0}, gpu1{wm::Device::Kind::kCuda, 1};
  const double err =
      wm::test::ranks_vs_one_rank(wm::Precision::kFloat32, {gpu0, gpu1}, {4, 5}, /*nccl=*/true);
  std::cout << "[ ranks    ] cuda fp32 NCCL ranks on GPUs 0 and 1: max diff " << err << "\n";
  EXPECT_LE(err, 1e-4);
}

}  // namespace
