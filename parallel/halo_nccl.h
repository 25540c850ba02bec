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

// A group of one rank per CUDA device in `devices` (distinct indices; rank r on devices[r]).
// `timeout`: the longest the communicators' setup, and any send or receive of a run (from
// begin()), may take before the group is aborted. Throws wm::Error when the build has no NCCL or
// a device repeats.
std::unique_ptr<ExchangeGroup> nccl_group(
    const std::vector<int>& devices, std::chrono::milliseconds timeout = std::chrono::minutes(30));

}  // namespace wm::parallel
