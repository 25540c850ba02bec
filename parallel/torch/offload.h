// Copies between device tensors and host Planars through bounded pools of pinned staging memory.
//
// OutputOffload (device → host): push() records where the chunk's producing work stands on the
// caller's stream and queues the chunk; a copier thread of its own copies it in pieces, each no
// larger than a pool buffer, on a copy stream into pinned buffers and from there into the
// destination Planar (a host memcpy that overlaps the device's later work and the caller's
// launching of it). The caller's thread neither waits for copies nor touches the destination
// until finish(). allocate() makes a destination on the copier thread too: zero-filling hundreds
// of MB is host work the launching thread need not do. A CPU chunk goes through the same thread
// (plain host buffers), so the piece logic is the same everywhere.
//
// InputStaging (host → device): upload() copies a Planar through pinned buffers in pieces (the
// host memcpy of one piece overlaps the device copy of the one before) on a copy stream, and
// makes the caller's stream wait for it.
//
// Memory bounds: each pool holds at most `pool_bytes` of pinned memory, allocated once and kept;
// OutputOffload holds at most `max_chunks` pushed chunks that are not yet copied (push() blocks
// until one is done: backpressure on the producer, which bounds the device memory they hold).
//
// One producer thread per object. Destinations must outlive finish()/abandon().
//
// They implement the sink and staging of src/exec/device_context.h; a device worker's context
// (device_context.h) owns one of each and hands them to the sessions it runs. LibTorch side.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <future>
#include <memory>

#include "src/base/planar.h"
#include "src/exec/device_context.h"

namespace wm::parallel {

// The pinned staging memory of each pool when none is asked for.
constexpr int64_t kDefaultPinnedPoolBytes = int64_t(256) << 20;

class OutputOffload final : public exec::OutputSink {
 public:
  // pool_bytes <= 0: kDefaultPinnedPoolBytes. It is split into `buffers` buffers (pieces).
  explicit OutputOffload(int64_t pool_bytes = 0, int buffers = 4, int max_chunks = 3);
  ~OutputOffload() override;
  OutputOffload(const OutputOffload&) = delete;
  OutputOffload& operator=(const OutputOffload&) = delete;

  // Makes `dst` = Planar(c, t, h, w) on the copier thread, ordered before later pushes. `dst`
  // must not be used by the caller until finish().
  void allocate(Planar& dst, int c, int t, int h, int w) override;
  // Later pushes land once `ready` is (the copier thread waits for it; what it throws, finish()
  // throws).
  void wait(std::shared_future<void> ready) override;
  // `chunk`: [C, n, h, w] float32, contiguous; becomes frames [first_frame, first_frame + n),
  // rows [top, top + h) and columns [left, left + w) of `dst` (C channels). The chunk is kept
  // alive until copied.
  void push(const at::Tensor& chunk, Planar& dst, int first_frame, int top = 0,
            int left = 0) override;
  // Waits until every pushed chunk is in its Planar; throws what the copier hit (a chunk that
  // does not fit its destination: ModelError).
  void finish() override;
  // Waits for the copies in flight and forgets the queued chunks (after an error): destinations
  // get no more writes (allocations still happen).
  void abandon() override;
  // A Completion for everything allocated and pushed so far (see exec::OutputSink::mark).
  std::shared_ptr<exec::Completion> mark() override;

  int64_t pool_bytes() const;
  // Staging bytes allocated so far (never more than pool_bytes()).
  int64_t staged_bytes() const;
  // Pieces copied so far (a chunk larger than a buffer takes several).
  int64_t pieces() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class InputStaging final : public exec::InputStager {
 public:
  explicit InputStaging(int64_t pool_bytes = 0, int buffers = 2);
  ~InputStaging() override;
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;

  // `in` as a float32 [1, C, T, H, W] tensor on `device` (contiguous), ordered before later work
  // on the device's current stream. For a CPU device: a copy.
  at::Tensor upload(const Planar& in, at::Device device) override;

  int64_t pool_bytes() const;
  int64_t staged_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::parallel
