#include "src/models/cuda_offload.h"

#include <cstring>
#include <optional>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "src/base/error.h"

namespace wm::models {

namespace {

// Where a chunk goes in its destination.
struct Region {
  int first = 0, top = 0, left = 0;
  int64_t channels = 0, frames = 0, height = 0, width = 0;
};

// [C, n, h, w] floats → the region of every channel plane of dst.
void copy_planes(const float* src, Planar& dst, const Region& r) {
  const size_t row = size_t(r.width);
  const bool whole = r.top == 0 && r.left == 0 && r.height == dst.height && r.width == dst.width;
  for (int64_t c = 0; c < r.channels; ++c) {
    for (int64_t f = 0; f < r.frames; ++f) {
      const float* from = src + size_t((c * r.frames + f) * r.height) * row;
      float* to = dst.plane(int(c), r.first + int(f));
      if (whole) {
        std::memcpy(to, from, size_t(r.height) * row * sizeof(float));
        continue;
      }
      for (int64_t y = 0; y < r.height; ++y) {
        std::memcpy(to + size_t(r.top + y) * size_t(dst.width) + size_t(r.left),
                    from + size_t(y) * row, row * sizeof(float));
      }
    }
  }
}

Region check_chunk(const at::Tensor& chunk, const Planar& dst, int first, int top, int left) {
  if (chunk.dim() != 4 || chunk.scalar_type() != at::kFloat || !chunk.is_contiguous() ||
      chunk.size(0) != dst.channels || first < 0 || top < 0 || left < 0 ||
      first + chunk.size(1) > dst.frames || top + chunk.size(2) > dst.height ||
      left + chunk.size(3) > dst.width) {
    throw ModelError("OutputOffload: chunk does not fit its destination");
  }
  return Region{first, top, left, chunk.size(0), chunk.size(1), chunk.size(2), chunk.size(3)};
}

}  // namespace

struct OutputOffload::Impl {
  struct Slot {
    at::Tensor pinned;  // staging, grown on demand, kept
    at::Tensor source;  // the device chunk, alive until its copy is done
    Planar* dst = nullptr;
    Region region;
    bool busy = false;
#ifdef WMBATCH_WITH_CUDA
    at::cuda::CUDAEvent done;
#endif
  };
  std::vector<Slot> slots;
  size_t next = 0;
#ifdef WMBATCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> copy_stream;
#endif

  void drain(Slot& s, bool write) {
#ifdef WMBATCH_WITH_CUDA
    s.done.synchronize();
#endif
    if (write) copy_planes(s.pinned.data_ptr<float>(), *s.dst, s.region);
    s.source.reset();
    s.dst = nullptr;
    s.busy = false;
  }
  void drain_all(bool write) {
    for (size_t k = 0; k < slots.size(); ++k) {
      Slot& s = slots[(next + k) % slots.size()];  // oldest first
      if (s.busy) drain(s, write);
    }
  }
};

OutputOffload::OutputOffload(int slots) : impl_(std::make_unique<Impl>()) {
  impl_->slots.resize(size_t(slots < 1 ? 1 : slots));
}

OutputOffload::~OutputOffload() {
  try {
    abandon();
  } catch (...) {
  }
}

void OutputOffload::push(const at::Tensor& chunk, Planar& dst, int first_frame, int top, int left) {
  const Region region = check_chunk(chunk, dst, first_frame, top, left);
  if (!chunk.is_cuda()) {
    at::Tensor c = chunk.cpu();
    copy_planes(c.data_ptr<float>(), dst, region);
    return;
  }
#ifdef WMBATCH_WITH_CUDA
  Impl& m = *impl_;
  Impl::Slot& s = m.slots[m.next];
  m.next = (m.next + 1) % m.slots.size();
  if (s.busy) m.drain(s, true);
  const int64_t numel = chunk.numel();
  if (!s.pinned.defined() || s.pinned.numel() < numel) {
    s.pinned = at::Tensor();
    s.pinned = at::empty({numel}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  }
  const c10::DeviceIndex device = chunk.device().index();
  if (!m.copy_stream || m.copy_stream->device_index() != device) {
    m.copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  }
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device));
  ready.block(*m.copy_stream);
  {
    c10::cuda::CUDAStreamGuard guard(*m.copy_stream);
    s.pinned.narrow(0, 0, numel).view(chunk.sizes()).copy_(chunk, /*non_blocking=*/true);
  }
  s.done.record(*m.copy_stream);
  s.source = chunk;
  s.dst = &dst;
  s.region = region;
  s.busy = true;
#else
  throw ModelError("OutputOffload: CUDA tensor in a build without CUDA");
#endif
}

void OutputOffload::finish() { impl_->drain_all(true); }

void OutputOffload::abandon() { impl_->drain_all(false); }

}  // namespace wm::models
