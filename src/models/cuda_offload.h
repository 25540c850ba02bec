// Device → host offload of finished output chunks through a ring of pinned staging buffers.
//
// push() starts an asynchronous copy of a device chunk on a dedicated copy stream (ordered after
// the work already queued on the caller's current stream) into a pinned slot and returns without
// waiting; when a slot comes round again, the copy it holds is waited for and moved into its
// destination Planar (a host memcpy that overlaps the device's later work). finish() drains all
// slots. A CPU chunk (or a build without CUDA) is copied synchronously.
//
// One thread at a time. The destination Planars must outlive finish(). Slots and their pinned
// memory are kept between uses (reuse one OutputOffload per session).
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "src/base/planar.h"

namespace wm::models {

class OutputOffload {
 public:
  explicit OutputOffload(int slots = 3);
  ~OutputOffload();
  OutputOffload(const OutputOffload&) = delete;
  OutputOffload& operator=(const OutputOffload&) = delete;

  // `chunk`: [C, n, h, w] float32, contiguous; becomes frames [first_frame, first_frame + n),
  // rows [top, top + h) and columns [left, left + w) of `dst` (C channels). The chunk is kept
  // alive until copied.
  void push(const at::Tensor& chunk, Planar& dst, int first_frame, int top = 0, int left = 0);
  // Waits for every pushed chunk and writes it into its Planar.
  void finish();
  // Waits for the copies in flight and forgets them (after an error; destinations untouched).
  void abandon();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wm::models
