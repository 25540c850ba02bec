// Fault points: named places in product code where a test can make a real failure happen (an
// out-of-memory error in the middle of a model call), without the product carrying the test's
// counters or thresholds. The product only calls fault_point(point, amount); test support
// (tests/support/*_fault.h) installs a hook that decides, from its own state, whether to throw.
// With no hook installed a point costs one atomic load.
//
// Threading: set_fault_hook and fault_point may be called from any thread; a hook runs on the
// thread that reaches the point and must be thread-safe itself.
#pragma once

#include <atomic>
#include <cstdint>

namespace wm {

enum class FaultPoint {
  kRealEsrganCall,   // before each network call; amount = input pixels (frames × height × width)
  kSeedvr2VaeChunk,  // SeedVR2 VAE: each output chunk before it is delivered (the causal state
                     // already moved past it); amount = the chunk's values
  kCount
};

// The hook may throw (that is its purpose); the exception leaves fault_point as it is.
using FaultHook = void (*)(int64_t amount);

namespace detail {
extern std::atomic<FaultHook> g_fault_hooks[int(FaultPoint::kCount)];
}

// Installs `hook` at `point` (nullptr removes it).
void set_fault_hook(FaultPoint point, FaultHook hook);

inline void fault_point(FaultPoint point, int64_t amount) {
  const FaultHook hook = detail::g_fault_hooks[int(point)].load(std::memory_order_acquire);
  if (hook) hook(amount);
}

}  // namespace wm
