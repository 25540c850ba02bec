// The NCCL halo exchange: one rank per GPU of this process, send/recv on the rank's current
// stream (its device worker's compute stream). Communicators for a device set are made once per
// process (one group of ncclCommInitRankConfig calls, non-blocking) and reused by every job on
// that set. Non-blocking: a send or receive returns once NCCL has enqueued it; its caller polls
// ncclCommGetAsyncError meanwhile, so no host thread waits inside NCCL. An abort (a rank's
// failure, an NCCL error seen by health(), or the session's timeout) aborts them (ncclCommAbort:
// device work waiting on a peer ends), and the next run on that set makes new ones. Built when
// CMake finds NCCL with CUDA (WMBATCH_WITH_NCCL); without it nccl_group() throws.
// Torch-free header; nccl_group() is on the LibTorch side (the torch-free code calls it through
// parallel/torch_side.h).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/exchange_group.h"

namespace wm::parallel {

// True when this build has NCCL (known without loading LibTorch).
inline bool nccl_available() {
#ifdef WMBATCH_WITH_NCCL
  return true;
#else
  return false;
#endif
}

// NCCL's send and receive kernels wait on the device for their peers, and CUDA's lazy kernel
// loading (its default since 12.2) may wait for a device's running kernels before it loads a
// kernel first used mid-run: the two deadlock (CUDA's "lazy loading hazards"; seen on two
// H200s: a rank's first cuDNN conv of a shape loading while the NCCL send of its peer waited for
// it). So NCCL runs only in a process started with CUDA_MODULE_LOADING=EAGER (the multi-GPU
// tests are); elsewhere nccl_group() warns and the ranks exchange in-process (exact, and faster
// on two H200s: docs/gpu.md). Under EAGER the Wan2.1 benchmark's NCCL time split did not finish
// in 80 s on two H200s (2026-11-29; not understood yet), so nothing asks for it by itself.

// A group of one rank per CUDA device in `devices` (distinct indices; rank r on devices[r]).
// `timeout`: the longest the communicators' setup, and any send or receive of a run (from
// begin()), may take before the group is aborted. Throws wm::Error when the build has no NCCL or
// a device repeats. In a process whose CUDA loads kernels lazily: an in-process group, with a
// warning (above).
std::unique_ptr<ExchangeGroup> nccl_group(
    const std::vector<int>& devices, std::chrono::milliseconds timeout = std::chrono::minutes(30));

}  // namespace wm::parallel
