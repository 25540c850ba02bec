// The Real-ESRGAN out-of-memory fault for tests on the CPU (tests/unit/test_realesrgan.cpp): a
// hook at the model's network call (src/base/fault_point.h, FaultPoint::kRealEsrganCall) that
// throws c10::OutOfMemoryError, the error LibTorch's CUDA allocator throws, so the out-of-memory
// retry of `tiling: auto` can be tested without a GPU.
// Header-only (LibTorch): include it from the model tests only.
#pragma once

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>

#include "src/base/fault_point.h"

namespace wm::models {

namespace realesrgan_fault {
inline std::atomic<int64_t> call{-1};
inline std::atomic<int64_t> max_pixels{0};
inline std::atomic<int64_t> calls{0};

inline void hook(int64_t pixels) {
  const int64_t n = calls.fetch_add(1);
  const int64_t most = max_pixels.load();
  if (n == call.load() || (most > 0 && pixels > most)) {
    TORCH_CHECK_WITH(OutOfMemoryError, false,
                     "realesrgan: injected out of memory (test fault) at call ", n, ", ", pixels,
                     " pixels");
  }
}
}  // namespace realesrgan_fault

// From now on, network call number `call` (0-based, counted from this call over the whole
// process; < 0: none) and every call with more than `max_pixels` input pixels (frames × height ×
// width; 0: no limit) throw c10::OutOfMemoryError. realesrgan_oom_fault_for_test(-1, 0) turns it
// off.
inline void realesrgan_oom_fault_for_test(int64_t call, int64_t max_pixels = 0) {
  realesrgan_fault::calls = 0;
  realesrgan_fault::call = call;
  realesrgan_fault::max_pixels = max_pixels;
  const bool on = call >= 0 || max_pixels > 0;
  set_fault_hook(FaultPoint::kRealEsrganCall, on ? &realesrgan_fault::hook : nullptr);
}

}  // namespace wm::models
