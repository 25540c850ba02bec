// Sequence parallelism on one GPU: two ranks (device workers with a stream each, in-process halo
// exchange through device memory) decode the golden latents as one rank does, within the golden
// tolerance, in float32 and bf16, over several slices.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>

#include "src/base/error.h"
#include "tests/unit/sequence_parallel_gpu.h"

namespace {

TEST(SequenceParallelGpu, TwoRanksOnOneGpuEqualOneRank) {
  if (torch::cuda::device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const wm::Device gpu{wm::Device::Kind::kCuda, 0};
  for (wm::Precision precision : {wm::Precision::kFloat32, wm::Precision::kBFloat16}) {
    const double err = wm::test::ranks_vs_one_rank(precision, {gpu, gpu}, {4, 5});
    std::cout << "[ ranks    ] cuda " << wm::to_string(precision)
              << " 2 ranks on one GPU: max diff " << err << "\n";
    EXPECT_LE(err, precision == wm::Precision::kFloat32 ? 1e-4 : 0.05);
  }
}

// Whole slices in turn over four ranks sharing the GPU, the decode tail in two tiles: each tile's
// causal state goes to the next slice's rank, whose tail takes the grid of the sequence's first
// slice (it comes along the ring with the state; four ranks planning their own grids from their
// own free memory failed at 1080p on a history's size).
TEST(SequenceParallelGpu, WholeSlicesWithATiledTailEqualOneRank) {
  if (torch::cuda::device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const wm::Device gpu{wm::Device::Kind::kCuda, 0};
  const double err =
      wm::test::ranks_vs_one_rank(wm::Precision::kFloat32, {gpu, gpu, gpu, gpu}, {2, 2, 2, 2, 1},
                                  false, wm::parallel::SplitBy::kTime, true, "tail_tiles=1x2");
  std::cout << "[ ranks    ] cuda float32 whole slices, 4 ranks, 1x2 tail tiles: max diff " << err
            << "\n";
  EXPECT_LE(err, 1e-4);
}

}  // namespace

namespace {

// An NCCL communicator of size 1 (one GPU) is made, reused by a second group on the same GPU,
// and a run on it starts; a link to a rank outside the group is refused.
TEST(SequenceParallelGpu, NcclGroupOfOneGpu) {
  if (torch::cuda::device_count() < 1) GTEST_SKIP() << "no CUDA device";
  if (!wm::parallel::nccl_available()) GTEST_SKIP() << "built without WMBATCH_WITH_NCCL";
  for (int i = 0; i < 2; ++i) {
    auto group = wm::parallel::nccl_group({0});
    group->begin(1);
    EXPECT_EQ(group->size(), 1);
    EXPECT_EQ(group->stats().messages, 0);
  }
  EXPECT_THROW(wm::parallel::nccl_group({0, 0}), wm::Error);
}

}  // namespace
