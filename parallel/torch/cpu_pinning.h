// CPU ranks on cores of their own: the LibTorch side of SequenceParallelSession's pinning
// (torch_side.h, TorchDevices::pin_cpu_rank). Include only from the LibTorch side.
#pragma once

namespace wm::parallel {

// Called on CPU rank `rank`'s worker thread: pins that thread and its intra-op threads (LibTorch's
// OpenMP team of this thread, at::get_num_threads() of them) to CPUs [rank·t, rank·t + t) of the
// CPUs the process may run on, so the ranks' threads never share a core or move between the
// ranks' cores. Returns t; 0, pinning nothing, when `ranks` · t is more than those CPUs.
// rank < 0: the thread and its team may run on every CPU of the process again (returns 0).
int pin_cpu_rank(int rank, int ranks);

}  // namespace wm::parallel
