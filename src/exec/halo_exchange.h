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
  // Receives the next message from rank `from` into `into` (contiguous in its memory format).
  virtual void recv(int from, at::Tensor& into) = 0;
};

}  // namespace wm::exec
