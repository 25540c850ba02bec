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

// [C, n, H, W] floats → frames [first, first + n) of every channel plane of dst.
void copy_planes(const float* src, Planar& dst, int first, int64_t channels, int64_t n) {
  const size_t frame = dst.plane_size();
  for (int64_t c = 0; c < channels; ++c) {
    std::memcpy(dst.plane(int(c), first), src + size_t(c) * size_t(n) * frame,
                size_t(n) * frame * sizeof(float));
  }
}

void check_chunk(const at::Tensor& chunk, const Planar& dst, int first) {
  if (chunk.dim() != 4 || chunk.scalar_type() != at::kFloat || !chunk.is_contiguous() ||
      chunk.size(0) != dst.channels || chunk.size(2) != dst.height || chunk.size(3) != dst.width ||
      first < 0 || first + chunk.size(1) > dst.frames) {
    throw ModelError("OutputOffload: chunk does not fit its destination");
  }
}

}  // namespace

struct OutputOffload::Impl {
  struct Slot {
    at::Tensor pinned;  // staging, grown on demand, kept
    at::Tensor source;  // the device chunk, alive until its copy is done
    Planar* dst = nullptr;
    int first = 0;
    int64_t channels = 0, frames = 0;
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
    if (write) copy_planes(s.pinned.data_ptr<float>(), *s.dst, s.first, s.channels, s.frames);
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

void OutputOffload::push(const at::Tensor& chunk, Planar& dst, int first_frame) {
  check_chunk(chunk, dst, first_frame);
  if (!chunk.is_cuda()) {
    at::Tensor c = chunk.cpu();
    copy_planes(c.data_ptr<float>(), dst, first_frame, c.size(0), c.size(1));
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
  s.first = first_frame;
  s.channels = chunk.size(0);
  s.frames = chunk.size(1);
  s.busy = true;
#else
  throw ModelError("OutputOffload: CUDA tensor in a build without CUDA");
#endif
}

void OutputOffload::finish() { impl_->drain_all(true); }

void OutputOffload::abandon() { impl_->drain_all(false); }

}  // namespace wm::models
