// The SeedVR2 VAE out-of-memory fault for tests on the CPU (tests/unit/test_seedvr2_memory.cpp):
// a hook at the fault point every output chunk of a SeedVR2 VAE session passes before it is
// delivered, after the causal state moved past it (src/base/fault_point.h,
// FaultPoint::kSeedvr2VaeChunk). It throws c10::OutOfMemoryError, the error LibTorch's CUDA
// allocator throws, so the out-of-memory retry (the state restored, the slice run again with a
// smaller plan) can be tested without a GPU.
// Header-only (LibTorch): include it from the model tests only.
#pragma once

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>

#include "src/base/fault_point.h"

namespace wm::models {

namespace seedvr2_fault {
inline std::atomic<int64_t> chunk{-1};
inline std::atomic<int64_t> chunks{0};

inline void hook(int64_t /*values*/) {
  const int64_t n = chunks.fetch_add(1);
  if (n == chunk.load()) {
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     "seedvr2-vae: injected out of memory (test fault) at output chunk ", n);
  }
}
}  // namespace seedvr2_fault

// From now on, output chunk number `chunk` of SeedVR2 VAE sessions (0-based, counted from this
// call over the whole process; < 0: none) throws c10::OutOfMemoryError instead of being
// delivered. seedvr2_oom_fault_for_test(-1) turns it off.
inline void seedvr2_oom_fault_for_test(int64_t chunk) {
  seedvr2_fault::chunks = 0;
  seedvr2_fault::chunk = chunk;
  set_fault_hook(FaultPoint::kSeedvr2VaeChunk, chunk >= 0 ? &seedvr2_fault::hook : nullptr);
}

}  // namespace wm::models
