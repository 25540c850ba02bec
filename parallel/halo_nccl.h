// The NCCL halo exchange: one rank per GPU of this process, send/recv on the rank's current
// stream (its device worker's compute stream). Communicators for a device set are made once per
// process (ncclCommInitAll) and reused by every job on that set; an abort (a rank's failure or
// the session's timeout) aborts them (ncclCommAbort: device work waiting on a peer ends), and the
// next run on that set makes new ones. Built with -DWMBATCH_WITH_NCCL=ON (system nccl.h and
// libnccl); without it nccl_group() throws. Torch-free header.
#pragma once

#include <memory>
#include <vector>

#include "parallel/exchange_group.h"

namespace wm::parallel {

// True when this build has NCCL.
bool nccl_available();

// A group of one rank per CUDA device in `devices` (distinct indices; rank r on devices[r]).
// Throws wm::Error when the build has no NCCL or a device repeats.
std::unique_ptr<ExchangeGroup> nccl_group(const std::vector<int>& devices);

}  // namespace wm::parallel
