// Halo exchange between the ranks of a sequence-parallel decode: rank r holds the r-th run of
// a slice's latent frames; before each causal temporal convolution it receives from rank r − 1
// the last input frames that convolution needs (its causal cache) and sends its own to r + 1.
// A spatial-parallel decode (RunContext::halo_rows) uses it too: rank r holds a band of rows and
// swaps boundary rows with r − 1 and r + 1 before each 3×3 convolution, and gathers every
// band's tokens for the attention (in an order with no cycle of ranks waiting on each other,
// since an NCCL send waits on the device for its receive).
// Declared here, implemented in parallel/ (in-process: threads as ranks, CPU tensors or several
// ranks on one GPU; NCCL: one rank per GPU). Include only from LibTorch translation units.
//
// Contract: messages between two ranks arrive in the order they were sent; send() does not
// wait for the receiver (the data is copied or ordered on the sender's current stream first),
// recv() returns when the data is in `into` (on CUDA: ordered before later work on the current
// stream). A failure anywhere (abort(), a timeout) makes every waiting and later call throw
// wm::Error naming the rank and the cause: no rank hangs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace wm::exec {

class HaloExchange {
 public:
  virtual ~HaloExchange() = default;
  // This rank and the number of ranks taking part in the current run (ranks with no frames of a
  // slice sit it out).
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  // Sends `t` (any shape; the receiver's `into` has the same number of bytes) to rank `to`.
  virtual void send(int to, const at::Tensor& t) = 0;
  // send(), for a tensor the caller gives up: nothing writes its memory again (handles kept
  // elsewhere only read it; a causal layer's new history, dropped once sent, or a state snapshot
  // kept for a retry). An exchange may then pass the tensor itself instead of a copy (in-process:
  // with recv()'s adoption, no copy at all). Default: send().
  virtual void give(int to, at::Tensor&& t) { send(to, t); }
  // Receives the next message from rank `from` into `into` (contiguous in its memory format).
  // An exchange may instead make `into` the message's own memory when nothing else refers to
  // `into`'s (same sizes, strides, dtype and device): no copy.
  virtual void recv(int from, at::Tensor& into) = 0;
  // A few host values (a plan, a count) to and from rank `to`/`from`, in order per pair, apart
  // from the tensors: the ranks are threads of one process in every exchange, so they go host to
  // host, and a rank that needs them on the host does not wait for its device.
  virtual void send_values(int to, const std::vector<int64_t>& values) = 0;
  virtual std::vector<int64_t> recv_values(int from) = 0;

  // A time split runs as a ring: every causal layer takes its history (the last input frames of
  // the rank before) from history_from() and hands its new history to history_to(), as soon as
  // it exists. Rank r > 0 takes it from r − 1; rank 0 from the last rank of the sequence's
  // previous slice (so rank 0 starts the next slice while later ranks still finish this one), or
  // -1: it keeps its own (the sequence's first slice, or a previous slice it ran alone). The
  // last rank hands it to rank 0 when another slice follows, else -1. A layer run in several
  // calls (frame chunks, tiles run again) takes it before its first call and hands it on after
  // its last. Defaults: a line of ranks (no ring).
  virtual int history_from() const { return rank() > 0 ? rank() - 1 : -1; }
  virtual int history_to() const { return rank() + 1 < ranks() ? rank() + 1 : -1; }
};

// A rank's view of an exchange for one slice: its rank among the slice's ranks and, for a time
// split, its place in the ring (the sequence-parallel session makes one per rank and slice).
class SliceExchange final : public HaloExchange {
 public:
  SliceExchange(HaloExchange& inner, int rank, int ranks, int from = -1, int to = -1)
      : inner_(inner), rank_(rank), ranks_(ranks), from_(from), to_(to) {}
  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  void send(int to, const at::Tensor& t) override { inner_.send(to, t); }
  void give(int to, at::Tensor&& t) override { inner_.give(to, std::move(t)); }
  void recv(int from, at::Tensor& into) override { inner_.recv(from, into); }
  void send_values(int to, const std::vector<int64_t>& values) override {
    inner_.send_values(to, values);
  }
  std::vector<int64_t> recv_values(int from) override { return inner_.recv_values(from); }
  int history_from() const override { return from_; }
  int history_to() const override { return to_; }

 private:
  HaloExchange& inner_;
  int rank_, ranks_, from_, to_;
};

// Whether a rank keeps the chunk plan it made before for the same shape, given the size (working
// memory, chunk frames) a fresh plan allows now. A rank plans from what its device has free when
// it starts; ranks sharing a device plan while the others allocate, so fresh plans change slice
// to slice, and each new chunk length is a new set of conv shapes: a cuDNN search each (seconds
// of the rank's thread at these sizes; stop 45: SeedVR2's two ranks on one H200 ran at 0.70× for
// it, 1.04× with the search off). So a rank keeps its plan while a fresh one allows at least 3/4
// of it (the plans leave that much spare: SeedVR2's work is 2/3 of what is left beside the state,
// Wan2.1's tail asks 1.4× its estimate) and takes a tighter one otherwise: its chunk lengths
// settle in its first slices. One device plans afresh: what it reads is its own.
inline bool rank_keeps_plan(int64_t kept, int64_t fresh) { return 4 * fresh >= 3 * kept; }

}  // namespace wm::exec
