// Tiny SeedVR2 networks, and one SeedVR2 upscale batch split inside over in-process ranks (threads
// of one InProcessGroup, each with its ring view: history from rank r − 1, to rank r + 1), for the
// split tests on CPU ranks (test_seedvr2_upscale_split.cpp) and on one GPU
// (test_seedvr2_split_gpu.cpp). Header-only (LibTorch): include it from the model tests only.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/halo_inprocess.h"
#include "src/exec/halo_exchange.h"
#include "src/model.h"
#include "src/models/seedvr2/seedvr2_layout.h"
#include "src/models/seedvr2/torch/seedvr2_upscale_probed.h"

namespace wm::test {

// Tiny random SeedVR2 networks of the golden data's widths (make_seedvr2_random's shapes).
inline models::seedvr2::DitArchitecture tiny_seedvr2_dit() {
  models::seedvr2::DitArchitecture dit = models::seedvr2::DitArchitecture::official_3b();
  dit.dim = 64, dit.heads = 2, dit.head_dim = 32, dit.layers = 4, dit.mm_layers = 2;
  dit.mlp_hidden = 256, dit.rope_freqs = 5, dit.txt_in_dim = 32;
  return dit;
}
inline models::seedvr2::Architecture tiny_seedvr2_vae() {
  models::seedvr2::Architecture vae;
  vae.channels = {16, 32, 64, 64};
  vae.norm_groups = 4;
  return vae;
}

// Rank r's output of `frames` (every rank passes the whole batch, seeded by `first_frame`);
// `errors[r]`: what rank r threw ("" when nothing), the group aborted then so the others stop.
// `probe(r)`: rank r's probe of the intermediates (none when empty).
inline std::vector<Planar> run_upscale_ranks(
    const Model& model, const Planar& frames, int ranks, int64_t first_frame,
    std::vector<std::string>& errors,
    const std::function<models::seedvr2::DitProbe(int rank)>& probe = {}) {
  parallel::InProcessGroup group(ranks, std::chrono::seconds(120));
  group.begin(ranks);
  std::vector<Planar> out(static_cast<size_t>(ranks));
  errors.assign(static_cast<size_t>(ranks), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      exec::SliceExchange view(group.rank(r), r, ranks, r > 0 ? r - 1 : -1,
                               r + 1 < ranks ? r + 1 : -1);
      RunContext ctx;
      ctx.first_frame = first_frame;
      ctx.halo = &view;
      try {
        out[size_t(r)] = models::seedvr2::upscale_batch_probed(
            model, frames, ctx, probe ? probe(r) : models::seedvr2::DitProbe{});
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        group.abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace wm::test
