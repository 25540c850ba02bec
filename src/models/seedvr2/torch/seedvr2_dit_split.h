// Sequence parallelism inside one forward of SeedVR2's DiT (issue 29 item 6): rank r of R takes
// whole windows, a run of consecutive windows of each layout's window order (regular windows for
// even blocks, shifted for odd ones), as even in tokens as whole windows allow. A rank's video
// tokens live in the window order of the layout the next block uses; between blocks tokens move
// only from one layout to the other (each rank sends every other rank the tokens it holds that
// the other's windows of the next layout take). The text stream is replicated: every rank
// computes it alike, and the text's per-window attention outputs are gathered, so that every
// rank averages all windows in one device's order. Messages go through exec::HaloExchange
// (in-process ranks or NCCL), pair by pair in one global order, so no cycle of ranks waits on
// each other even where a send waits for its receive.
// Internal to src/models/seedvr2/torch/.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "src/models/seedvr2/torch/seedvr2_dit_windows.h"

namespace wm::exec {
class HaloExchange;
}

namespace wm::models::seedvr2 {

struct DitSplit {
  int rank = 0, ranks = 1;
  struct Layout {
    // Rank q's windows are [window_begin[q], window_begin[q + 1]) of the layout's window order,
    // its tokens the positions [token_begin[q], token_begin[q + 1]) ([ranks + 1] each).
    std::vector<int64_t> window_begin, token_begin;
    // This rank's windows as a plan of their own: order and inverse the identity (its tokens are
    // held in window order), groups rebased to its first token; angle tables and the fused
    // path's packing are filled in by the forward.
    WindowPlan local;
    std::vector<size_t> group_of;  // per local group: its group in the whole plan
    // Into the other layout: per peer q, the rows of this rank's array that go to q, and the
    // rows of this rank's array of the other layout that what q sends fills (both in the order
    // of the other layout's window order; this rank itself is a peer too).
    std::vector<at::Tensor> send_rows, recv_rows;
  } layout[2];

  int64_t tokens(int l) const {
    return layout[l].token_begin[size_t(rank) + 1] - layout[l].token_begin[size_t(rank)];
  }
};

// The split of the plans (regular, shifted; each of every token of the grid) over `ranks`. Throws
// ModelError when a layout has fewer windows than ranks. Index tensors on `device`.
DitSplit make_dit_split(const WindowPlan plans[2], int rank, int ranks, at::Device device);

// This rank's rows of layout `from` ([tokens(from), ...]) → its rows of the other layout.
at::Tensor move_tokens(const DitSplit& split, int from, const at::Tensor& rows,
                       exec::HaloExchange& exchange);

// Every rank's rows, concatenated in rank order: `mine` is this rank's [counts[rank], ...] (the
// ranks: the exchange's).
at::Tensor gather_rows(const at::Tensor& mine, const std::vector<int64_t>& counts,
                       exec::HaloExchange& exchange);

}  // namespace wm::models::seedvr2
