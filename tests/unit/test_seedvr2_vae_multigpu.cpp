// SeedVR2 decoder sequence-parallel over two GPUs (label multigpu; skips with fewer than 2):
// rank r on cuda:r, in-process exchange (and NCCL when this build has it), two slices; the
// gathered output equals one GPU's within 1e-5 in float32.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/sequence_parallel.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/weights/safetensors.h"

using wm::Planar;

namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/";

Planar golden_latent() {
  wm::io::SafetensorsFile file(kGolden + "decode_t5.safetensors");
  const auto& info = file.info("latent");
  Planar p(int(info.shape[1]), int(info.shape[2]), int(info.shape[3]), int(info.shape[4]));
  std::memcpy(p.data.data(), info.data, info.bytes);
  return p;
}

Planar frames(const Planar& p, int t0, int n) {
  Planar out(p.channels, n, p.height, p.width);
  for (int c = 0; c < p.channels; ++c) {
    std::memcpy(out.plane(c, 0), p.plane(c, t0), size_t(n) * p.plane_size() * sizeof(float));
  }
  return out;
}

Planar run(wm::ModelSession& session, const Planar& z, const std::vector<int>& slices) {
  std::vector<Planar> outs;
  int t0 = 0, total = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    wm::RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.last_slice = i + 1 == slices.size();
    outs.push_back(session.run(frames(z, t0, slices[i]), ctx));
    t0 += slices[i];
    total += outs.back().frames;
  }
  Planar out(outs[0].channels, total, outs[0].height, outs[0].width);
  int t = 0;
  for (const Planar& p : outs) {
    for (int c = 0; c < p.channels; ++c) {
      std::memcpy(out.plane(c, t), p.plane(c, 0), size_t(p.frames) * p.plane_size() * 4);
    }
    t += p.frames;
  }
  return out;
}

TEST(SeedVR2MultiGpu, TwoGpusEqualOne) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  const wm::Device gpu0{wm::Device::Kind::kCuda, 0}, gpu1{wm::Device::Kind::kCuda, 1};
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = "decode";
  config.weights = kGolden + "weights.safetensors";
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).norm_groups = 4;
  config.precision = wm::Precision::kFloat32;
  auto model = wm::models::make_seedvr2_vae(config, gpu0);
  const Planar z = golden_latent();
  const Planar whole = run(*model->open_session(gpu0), z, {5});
  std::vector<bool> exchanges = {false};
#ifdef WMBATCH_WITH_NCCL
  exchanges.push_back(true);
#endif
  for (bool nccl : exchanges) {
    std::vector<std::unique_ptr<wm::ModelSession>> sessions;
    sessions.push_back(model->open_session(gpu0));
    sessions.push_back(model->open_session(gpu1));
    std::vector<wm::parallel::DeviceWorker*> workers = {&wm::parallel::device_worker(gpu0, 0),
                                                        &wm::parallel::device_worker(gpu1, 0)};
    wm::parallel::SequenceParallelOptions options;
    options.nccl = nccl;
    options.timeout = std::chrono::seconds(60);  // a hung exchange fails here, with its error
    wm::parallel::SequenceParallelSession session(std::move(sessions), std::move(workers), options);
    // (NCCL only where CUDA loads kernels eagerly: ctest sets it for these tests.)
    EXPECT_STREQ(session.exchange_kind(), nccl ? "nccl" : "in-process");
    const Planar got = run(session, z, {3, 2});
    ASSERT_EQ(got.data.size(), whole.data.size());
    double err = 0;
    for (size_t i = 0; i < got.data.size(); ++i) {
      err = std::max(err, double(std::fabs(got.data[i] - whole.data[i])));
    }
    std::cout << "[ ranks    ] 2 GPUs (" << (nccl ? "NCCL" : "in-process") << "): max diff " << err
              << "\n";
    EXPECT_LE(err, 1e-5);
  }
}

}  // namespace
