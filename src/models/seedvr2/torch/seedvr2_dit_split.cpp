#include "src/models/seedvr2/torch/seedvr2_dit_split.h"

#include <algorithm>
#include <functional>
#include <string>

#include "src/base/error.h"
#include "src/exec/halo_exchange.h"

namespace wm::models::seedvr2 {
namespace {

// Calls meet(peer, sends_first) for each pair of ranks this rank is in, pairs in one global order
// ((0, 1), (0, 2), …, (1, 2), …): the lower rank sends first. Every rank goes through its pairs
// in that order, so the lowest pair not yet done always has both ranks at it.
void each_pair(int rank, int ranks, const std::function<void(int, bool)>& meet) {
  for (int a = 0; a < ranks; ++a) {
    for (int b = a + 1; b < ranks; ++b) {
      if (rank == a) meet(b, true);
      if (rank == b) meet(a, false);
    }
  }
}

// The windows of a layout split as evenly in tokens as whole windows allow, every rank at least
// one: the boundary before rank q is the window edge nearest q/ranks of the tokens.
std::vector<int64_t> window_bounds(const std::vector<int64_t>& edges, int ranks) {
  const int64_t windows = int64_t(edges.size()) - 1, total = edges.back();
  std::vector<int64_t> bounds(size_t(ranks) + 1, 0);
  bounds.back() = windows;
  for (int q = 1; q < ranks; ++q) {
    const int64_t target = total * q / ranks;
    int64_t w = std::lower_bound(edges.begin(), edges.end(), target) - edges.begin();
    if (w > 0 && target - edges[size_t(w) - 1] < edges[size_t(w)] - target) --w;
    w = std::clamp(w, bounds[size_t(q) - 1] + 1, windows - (ranks - q));
    bounds[size_t(q)] = w;
  }
  return bounds;
}

at::Tensor index_tensor(const std::vector<int64_t>& v, at::Device device) {
  return at::tensor(v, at::kLong).to(device);
}

}  // namespace

DitSplit make_dit_split(const WindowPlan plans[2], int rank, int ranks, at::Device device) {
  DitSplit split;
  split.rank = rank, split.ranks = ranks;
  at::Tensor order[2], inverse[2];
  for (int l = 0; l < 2; ++l) {
    const WindowPlan& plan = plans[l];
    if (plan.windows < ranks) {
      throw ModelError("seedvr2 dit: " + std::to_string(ranks) + " ranks for " +
                       std::to_string(plan.windows) + " windows (" + (l ? "shifted" : "regular") +
                       "): each rank takes whole windows");
    }
    order[l] = plan.order.to(at::kCPU);
    inverse[l] = plan.inverse.to(at::kCPU);
    // Token edges of the windows in window order, and each window's group.
    std::vector<int64_t> edges{0};
    for (const WindowGroup& g : plan.groups) {
      for (int64_t b = 0; b < g.windows; ++b) edges.push_back(edges.back() + g.tokens());
    }
    DitSplit::Layout& lay = split.layout[l];
    lay.window_begin = window_bounds(edges, ranks);
    for (int64_t w : lay.window_begin) lay.token_begin.push_back(edges[size_t(w)]);
    const int64_t w0 = lay.window_begin[size_t(rank)], w1 = lay.window_begin[size_t(rank) + 1];
    const int64_t k0 = lay.token_begin[size_t(rank)], n = lay.token_begin[size_t(rank) + 1] - k0;
    WindowPlan& local = lay.local;
    local.order = at::arange(n, at::TensorOptions(at::kLong).device(device));
    local.inverse = local.order;
    local.windows = w1 - w0;
    int64_t first = 0;  // the group's first window in window order
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      const WindowGroup& whole = plan.groups[g];
      const int64_t a = std::max(first, w0), b = std::min(first + whole.windows, w1);
      if (a < b) {
        WindowGroup part = whole;
        part.windows = b - a;
        part.offset = whole.offset + (a - first) * whole.tokens() - k0;
        local.groups.push_back(part);
        lay.group_of.push_back(g);
      }
      first += whole.windows;
    }
  }
  // Moves from layout l to the other, in the other layout's window order.
  for (int l = 0; l < 2; ++l) {
    const int m = 1 - l;
    const DitSplit::Layout &from = split.layout[l], &to = split.layout[m];
    const int64_t* into_order = order[m].data_ptr<int64_t>();
    const int64_t* from_pos = inverse[l].data_ptr<int64_t>();
    const int64_t N = order[m].numel();
    std::vector<std::vector<int64_t>> send(static_cast<size_t>(ranks)), recv(send);
    int q_to = 0;  // owner of position p in layout m
    for (int64_t p = 0; p < N; ++p) {
      while (p >= to.token_begin[size_t(q_to) + 1]) ++q_to;
      const int64_t at_from = from_pos[into_order[p]];
      const int q_from =
          int(std::upper_bound(from.token_begin.begin(), from.token_begin.end(), at_from) -
              from.token_begin.begin()) -
          1;
      if (q_from == rank) send[size_t(q_to)].push_back(at_from - from.token_begin[size_t(rank)]);
      if (q_to == rank) recv[size_t(q_from)].push_back(p - to.token_begin[size_t(rank)]);
    }
    DitSplit::Layout& lay = split.layout[l];
    for (int q = 0; q < ranks; ++q) {
      lay.send_rows.push_back(index_tensor(send[size_t(q)], device));
      lay.recv_rows.push_back(index_tensor(recv[size_t(q)], device));
    }
  }
  return split;
}

at::Tensor move_tokens(const DitSplit& split, int from, const at::Tensor& rows,
                       exec::HaloExchange& exchange) {
  const DitSplit::Layout& lay = split.layout[from];
  std::vector<int64_t> shape = rows.sizes().vec();
  shape[0] = split.tokens(1 - from);
  at::Tensor out = at::empty(shape, rows.options());
  const size_t me = size_t(split.rank);
  out.index_copy_(0, lay.recv_rows[me], rows.index_select(0, lay.send_rows[me]));
  each_pair(split.rank, split.ranks, [&](int peer, bool first) {
    const at::Tensor& to_send = lay.send_rows[size_t(peer)];
    const at::Tensor& to_take = lay.recv_rows[size_t(peer)];
    auto give = [&] {
      if (to_send.numel() > 0) exchange.send(peer, rows.index_select(0, to_send));
    };
    auto take = [&] {
      if (to_take.numel() == 0) return;
      shape[0] = to_take.numel();
      at::Tensor got = at::empty(shape, rows.options());
      exchange.recv(peer, got);
      out.index_copy_(0, to_take, got);
    };
    if (first) {
      give(), take();
    } else {
      take(), give();
    }
  });
  return out;
}

at::Tensor gather_rows(const at::Tensor& mine, const std::vector<int64_t>& counts,
                       exec::HaloExchange& exchange) {
  std::vector<int64_t> begin{0};
  for (int64_t c : counts) begin.push_back(begin.back() + c);
  std::vector<int64_t> shape = mine.sizes().vec();
  shape[0] = begin.back();
  at::Tensor out = at::empty(shape, mine.options());
  const size_t me = size_t(exchange.rank());
  out.narrow(0, begin[me], counts[me]).copy_(mine);
  each_pair(exchange.rank(), exchange.ranks(), [&](int peer, bool first) {
    auto give = [&] {
      if (counts[me] > 0) exchange.send(peer, mine.contiguous());
    };
    auto take = [&] {
      if (counts[size_t(peer)] == 0) return;
      at::Tensor part = out.narrow(0, begin[size_t(peer)], counts[size_t(peer)]);
      exchange.recv(peer, part);
    };
    if (first) {
      give(), take();
    } else {
      take(), give();
    }
  });
  return out;
}

}  // namespace wm::models::seedvr2
