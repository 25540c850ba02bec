// Sequence parallelism at the network level in tests: a time split run as the sequence-parallel
// session runs it (parallel/sequence_parallel.cpp), for any network whose causal state lives in a
// State with `halo`, `received` and `sends` members (wan21::SequenceState, seedvr2::StreamState):
// rank r is a thread of its own that runs its part of every slice in order, and the causal
// history goes around the ring (rank 0 of slice k + 1 takes it from slice k's last rank, while
// that rank may still be at work: no barrier between slices).
// Header-only (LibTorch): include it from the model tests only.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/halo_inprocess.h"
#include "src/exec/halo_exchange.h"

namespace wm::test {

// `x` ([N, C, T, H, W]) as consecutive slices, slice k split over ranks as `slices[k]` (frames
// per rank, summing to the slice), one sequence from frame 0. `run(part, state, first)` runs one
// rank's part (state.halo is set). Returns the slices' outputs concatenated in time; a rank's
// error fails the test.
template <class State>
at::Tensor forward_ring(const at::Tensor& x, const std::vector<std::vector<int>>& slices,
                        parallel::InProcessGroup& group,
                        const std::function<at::Tensor(const at::Tensor&, State&, bool)>& run) {
  int ranks = 1;
  for (const auto& s : slices) ranks = std::max(ranks, int(s.size()));
  group.begin(group.size());
  const size_t count = slices.size();
  // Per slice: where it starts, and the rank rank 0 takes its history from (the previous
  // slice's last rank, when that slice had more than one).
  std::vector<int64_t> starts(count, 0);
  std::vector<int> from0(count, -1);
  int64_t t = 0;
  for (size_t k = 0; k < count; ++k) {
    starts[k] = t;
    for (int n : slices[k]) t += n;
    if (k > 0 && slices[k - 1].size() > 1) from0[k] = int(slices[k - 1].size()) - 1;
  }
  EXPECT_EQ(t, x.size(2));
  std::vector<std::vector<at::Tensor>> outs(count);
  for (size_t k = 0; k < count; ++k) outs[k].resize(slices[k].size());
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      c10::InferenceMode inference;
      State st;
      try {
        for (size_t k = 0; k < count; ++k) {
          const int active = int(slices[k].size());
          if (r >= active) continue;
          int64_t t0 = starts[k];
          for (int q = 0; q < r; ++q) t0 += slices[k][size_t(q)];
          const at::Tensor part = x.narrow(2, t0, slices[k][size_t(r)]).contiguous();
          const int from = r > 0 ? r - 1 : from0[k];
          const int to = r + 1 < active ? r + 1 : (k + 1 < count && r > 0 ? 0 : -1);
          exec::SliceExchange view(group.rank(r), r, active, from, to);
          // A rank that takes its history from another starts empty (as the sessions do).
          if ((k == 0 && r == 0) || from >= 0) st = State{};
          st.halo = &view;
          st.received.clear();
          st.sends = true;
          outs[k][size_t(r)] = run(part, st, k == 0 && r == 0);
          st.halo = nullptr;
        }
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        group.abort(e.what());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  std::vector<at::Tensor> all;
  for (auto& slice : outs) {
    for (at::Tensor& o : slice) {
      if (!o.defined()) return at::Tensor();
      all.push_back(o);
    }
  }
  return at::cat(all, 2);
}

}  // namespace wm::test
