// Shared by the GPU sequence-parallel tests: the golden latents decoded by ranks on `devices`
// (split in time, or by rows with `by`; with `whole` each slice whole to one rank, in turn)
// against one rank on devices[0], both with the model tuning `tuning`; returns the largest
// difference.
#pragma once

#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/halo_nccl.h"
#include "parallel/sequence_parallel.h"
#include "src/model.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"

namespace wm::test {

inline double ranks_vs_one_rank(Precision precision, const std::vector<Device>& devices,
                                const std::vector<int>& slices, bool nccl = false,
                                parallel::SplitBy by = parallel::SplitBy::kTime, bool whole = false,
                                const std::string& tuning = "") {
  const std::string golden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/";
  std::ifstream in(golden + "meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const auto& c = meta.at("config");
  ModelConfig config;
  config.kind = "wan2.1-vae";
  config.task = "decode";
  config.weights = golden + "weights.safetensors";
  auto& arch = edit_options<models::Wan21VaeOptions>(config);
  arch.dim = c.at("dim").get<int>();
  arch.z_dim = c.at("z_dim").get<int>();
  arch.dim_mult = c.at("dim_mult").get<std::vector<int>>();
  arch.num_res_blocks = c.at("num_res_blocks").get<int>();
  arch.temporal_downsample = c.at("temperal_downsample").get<std::vector<bool>>();
  config.precision = precision;
  config.tuning = tuning;
  std::vector<std::unique_ptr<Model>> models;
  for (const Device& d : devices) models.push_back(make_model(config, d));

  io::SafetensorsFile file(golden + "decode_t9.safetensors");
  const io::TensorInfo& info = file.info("input");
  Planar z(int(info.shape[1]), int(info.shape[2]), int(info.shape[3]), int(info.shape[4]));
  std::memcpy(z.data.data(), info.data, info.bytes);
  auto part = [&](int t0, int n) {
    Planar p(z.channels, n, z.height, z.width);
    for (int ch = 0; ch < z.channels; ++ch) {
      std::memcpy(p.plane(ch, 0), z.plane(ch, t0), size_t(n) * z.plane_size() * sizeof(float));
    }
    return p;
  };
  // Runs the slices through `session` (called on `worker`, or directly when null).
  auto run = [&](ModelSession& session, parallel::DeviceWorker* worker) {
    std::vector<float> out;
    int t0 = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      RunContext ctx;
      ctx.slice_index = int64_t(i);
      ctx.first_slice = i == 0;
      ctx.last_slice = i + 1 == slices.size();
      Planar y;
      if (worker) {
        ctx.device = worker->context();
        y = worker->call([&] { return session.run(part(t0, slices[i]), ctx); });
      } else {
        y = session.run(part(t0, slices[i]), ctx);
      }
      // Frames of all channels, time-major per channel: compare channel planes in order.
      out.insert(out.end(), y.data.begin(), y.data.end());
      t0 += slices[i];
    }
    return out;
  };
  auto one = models[0]->open_session(devices[0]);
  const std::vector<float> expected = run(*one, &parallel::device_worker(devices[0], 0));

  std::vector<std::unique_ptr<ModelSession>> ranks;
  std::vector<parallel::DeviceWorker*> workers;
  std::vector<int> lanes(16, 1);  // lane 0 ran the one-rank reference
  for (size_t r = 0; r < devices.size(); ++r) {
    ranks.push_back(models[r]->open_session(devices[r]));
    workers.push_back(&parallel::device_worker(devices[r], lanes[size_t(devices[r].index)]++));
  }
  parallel::SequenceParallelOptions options;
  options.nccl = nccl;
  // A tiny model's slices take seconds: a hung exchange fails the test in a minute, with the
  // exchange's own error, instead of running into ctest's timeout.
  options.timeout = std::chrono::seconds(60);
  options.by = by;
  options.whole_slices = whole;
  parallel::SequenceParallelSession session(std::move(ranks), std::move(workers), options);
  // NCCL runs only where CUDA loads kernels eagerly (ctest sets CUDA_MODULE_LOADING=EAGER for
  // these tests); elsewhere the group is in-process, which this test is not about.
  if (nccl) {
    EXPECT_STREQ(session.exchange_kind(), "nccl") << "set CUDA_MODULE_LOADING=EAGER";
  }
  const std::vector<float> got = run(session, nullptr);
  if (got.size() != expected.size()) return 1e30;
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - double(expected[i]));
    if (std::isnan(d)) return 1e30;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace wm::test
