// Spatial parallelism on one GPU: two ranks (device workers with a stream each, in-process halo
// exchange through device memory), each decoding a band of the golden latents' rows, equal one
// rank within the golden tolerance, in float32 and bf16, over several slices and for a clip of
// one latent frame.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <iostream>

#include "tests/unit/sequence_parallel_gpu.h"

namespace {

TEST(SpatialParallelGpu, TwoBandsOnOneGpuEqualOneRank) {
  if (torch::cuda::device_count() < 1) GTEST_SKIP() << "no CUDA device";
  const wm::Device gpu{wm::Device::Kind::kCuda, 0};
  for (wm::Precision precision : {wm::Precision::kFloat32, wm::Precision::kBFloat16}) {
    for (const std::vector<int>& slices : {std::vector<int>{4, 5}, std::vector<int>{1}}) {
      const double err = wm::test::ranks_vs_one_rank(precision, {gpu, gpu}, slices, false,
                                                     wm::parallel::SplitBy::kRows);
      std::cout << "[ bands    ] cuda " << wm::to_string(precision)
                << " 2 spatial ranks on one GPU, " << slices.size() << " slices: max diff " << err
                << "\n";
      EXPECT_LE(err, precision == wm::Precision::kFloat32 ? 1e-4 : 0.05);
    }
  }
}

}  // namespace
