// Sequence parallelism at the network level in tests: one slice run as ranks on threads that
// exchange through an in-process group, for any network whose forward(x, state, first) keeps its
// causal state in a State with a `halo` pointer (wan21::SequenceState, seedvr2::StreamState).
// Header-only (LibTorch): include it from the model tests only.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "parallel/halo_inprocess.h"

namespace wm::test {

// One slice of `x` ([N, C, T, H, W]) on ranks holding `split` latent frames each (summing to T),
// rank r on a thread of its own; `state` is the sequence's (rank 0's) before and becomes the last
// rank's after, as the sequence-parallel session hands it over. A rank's error fails the test.
template <class Network, class State>
at::Tensor forward_ranks(const Network& net, const at::Tensor& x, State& state, bool first,
                         const std::vector<int>& split, parallel::InProcessGroup& group) {
  const int ranks = int(split.size());
  group.begin(ranks);
  std::vector<State> states(static_cast<size_t>(ranks));
  states[0] = state;
  std::vector<at::Tensor> outs(static_cast<size_t>(ranks));
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  int64_t t0 = 0;
  for (int r = 0; r < ranks; ++r) {
    const at::Tensor part = x.narrow(2, t0, split[size_t(r)]).contiguous();
    t0 += split[size_t(r)];
    threads.emplace_back([&, r, part] {
      c10::InferenceMode inference;
      State& st = states[size_t(r)];
      st.halo = ranks > 1 ? &group.rank(r) : nullptr;
      try {
        outs[size_t(r)] = net.forward(part, st, first && r == 0);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        group.abort(e.what());
      }
      st.halo = nullptr;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(t0, x.size(2));
  state = states.back();
  return at::cat(outs, 2);
}

}  // namespace wm::test
