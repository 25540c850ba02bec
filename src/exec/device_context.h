// What a device worker gives the model sessions it runs: the interfaces models call for device
// execution. They are declared here, in src/, and implemented in parallel/ (device_context.h,
// offload.h, memory_budget.h, halo_inprocess.h): a model computes; it does not own threads,
// streams or pinned memory. Include only from LibTorch translation units (models, parallel/).
//
// Threading: a DeviceContext belongs to one worker thread; a session reaches it through
// RunContext::device during run(), on that thread. While the worker runs a call, its device
// is the current device and its compute stream the current stream of that thread (CUDA), so a
// session computes on the current stream and never makes one.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "src/base/planar.h"

namespace wm::exec {

// A point in an OutputSink's work (OutputSink::mark): wait() returns once everything pushed or
// allocated before the mark is in place, and throws what those copies hit. Any thread may wait;
// it outlives the sink (a sink that goes away first lets its marked work land).
class Completion {
 public:
  virtual ~Completion() = default;
  virtual void wait() = 0;
};

// A slice's output that is still being copied: RunContext::deferred (src/model.h) receives one of
// these. Waits for `done` and hands `out` over, once. Dropped uncalled, it still waits (the
// copier writes into `out` until then).
inline std::function<Planar()> deferred_output(std::shared_ptr<Planar> out,
                                               std::shared_ptr<Completion> done) {
  struct State {
    std::shared_ptr<Planar> out;
    std::shared_ptr<Completion> done;
    ~State() {
      try {
        if (done) done->wait();
      } catch (...) {
      }
    }
  };
  auto state = std::make_shared<State>();
  state->out = std::move(out);
  state->done = std::move(done);
  return [state]() {
    const std::shared_ptr<Completion> done = std::exchange(state->done, nullptr);
    if (done) done->wait();
    return std::move(*state->out);
  };
}

// Device → host: chunks of device tensors copied into host Planars through bounded pinned
// staging, off the launching thread (parallel::OutputOffload has the full contract).
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // Makes `dst` = Planar(c, t, h, w), ordered before later pushes; the caller leaves `dst`
  // alone until finish().
  virtual void allocate(Planar& dst, int c, int t, int h, int w) = 0;
  // `chunk` [C, n, h, w] float32 contiguous → frames [first_frame, +n), rows [top, +h), columns
  // [left, +w) of `dst`. Records where the chunk's work stands on the current stream.
  virtual void push(const at::Tensor& chunk, Planar& dst, int first_frame, int top, int left) = 0;
  // Waits until every pushed chunk is in place; throws what the copies hit.
  virtual void finish() = 0;
  // After an error: waits for copies in flight, forgets queued chunks (but lets marked work
  // land first).
  virtual void abandon() = 0;
  // Marks everything allocated and pushed so far, without waiting: its Completion says when it
  // is in place. So a session can return a slice while the slice's last chunks still copy, and
  // the device starts the next slice meanwhile.
  virtual std::shared_ptr<Completion> mark() = 0;
};

// Host → device through pinned staging (parallel::InputStaging).
class InputStager {
 public:
  virtual ~InputStager() = default;
  // `in` as a float32 [1, C, T, H, W] tensor on `device`, ordered before later work on the
  // current stream. For a CPU device: a copy.
  virtual at::Tensor upload(const Planar& in, at::Device device) = 0;
};

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  virtual at::Device device() const = 0;
  // The worker's output sink and input staging; `pool_bytes` is the pinned memory each may hold
  // (0: the default). Made on first use and kept (one per worker: its sessions run one at a
  // time).
  virtual OutputSink& output_sink(int64_t pool_bytes) = 0;
  virtual InputStager& input_stager(int64_t pool_bytes) = 0;
  // Memory budget: the bytes sessions on this device may plan to use (0: what the device has
  // free). Set per device (parallel::set_memory_budget, wmbench --max-gpu-gib).
  virtual int64_t memory_budget() const = 0;
  // Side streams of the worker's device for copies beside the compute stream (k = 0, 1: state
  // uploads and write-backs of host-resident causal state). CUDA devices only.
  virtual c10::Stream side_stream(int k) = 0;
};

}  // namespace wm::exec
