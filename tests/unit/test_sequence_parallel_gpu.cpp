// Sequence parallelism on one GPU: two ranks (device workers with a stream each, in-process halo
// exchange through device memory) decode the golden latents as one rank does, within the golden
// tolerance, in float32 and bf16, over several slices.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>

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
