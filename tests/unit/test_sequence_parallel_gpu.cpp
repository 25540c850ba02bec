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
