#include "parallel/torch/offload.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "src/base/error.h"

namespace wm::parallel {

namespace {

int64_t pool_or_default(int64_t pool_bytes) {
  return pool_bytes > 0 ? pool_bytes : kDefaultPinnedPoolBytes;
}

// Where a chunk goes in its destination.
struct Region {
  int first = 0, top = 0, left = 0;
  int64_t channels = 0, frames = 0, height = 0, width = 0;
  int64_t rows() const { return channels * frames * height; }
};

bool fits(const Region& r, const Planar& dst) {
  return r.channels == dst.channels && r.first + r.frames <= dst.frames &&
         r.top + r.height <= dst.height && r.left + r.width <= dst.width;
}

// Rows [row0, row0 + n) of a [C, frames, h, w] chunk (at `src`, its first row at row0) → their
// places in dst.
void copy_rows(const float* src, int64_t row0, int64_t n, Planar& dst, const Region& r) {
  const size_t w = size_t(r.width);
  const bool whole_rows = r.left == 0 && r.width == dst.width;
  for (int64_t i = 0; i < n;) {
    const int64_t row = row0 + i;
    const int64_t plane = row / r.height, y = row % r.height;
    const int c = int(plane / r.frames), f = r.first + int(plane % r.frames);
    float* to = dst.plane(c, f) + size_t(r.top + y) * size_t(dst.width) + size_t(r.left);
    if (whole_rows) {  // the rest of this plane's rows in one copy
      const int64_t run = std::min(n - i, r.height - y);
      std::memcpy(to, src + size_t(i) * w, size_t(run) * w * sizeof(float));
      i += run;
    } else {
      std::memcpy(to, src + size_t(i) * w, w * sizeof(float));
      ++i;
    }
  }
}

// copy_rows on several threads for large pieces: one thread's copies out of pinned memory
// (~5 GB/s) fall behind a 1080p decode's float32 frames in the bursts the tail makes, and the
// device then waits in push().
void copy_rows_parallel(const float* src, int64_t row0, int64_t n, Planar& dst, const Region& r) {
  const int64_t rows_per_task =
      std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(r.width, 1));
  if (n <= rows_per_task) {
    copy_rows(src, row0, n, dst, r);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, rows_per_task),
                    [&](const tbb::blocked_range<int64_t>& part) {
                      copy_rows(src + size_t(part.begin()) * size_t(r.width), row0 + part.begin(),
                                part.size(), dst, r);
                    });
}

// A staging buffer: pinned when it serves a device, plain host memory otherwise.
struct Buffer {
  at::Tensor memory;
  float* ptr = nullptr;
  int64_t floats = 0;
  bool busy = false;
#ifdef WMBATCH_WITH_CUDA
  at::cuda::CUDAEvent done;
#endif
  void wait() {
#ifdef WMBATCH_WITH_CUDA
    done.synchronize();
#endif
  }
};

// Floats per buffer for a piece of `want` floats: staging grows with what is asked of it, never
// past the pool.
int64_t buffer_floats(int64_t pool_bytes, int count, int64_t want) {
  return std::min(want, std::max<int64_t>(pool_bytes / int64_t(sizeof(float)) / count, 1));
}

// Replaces `buffers` with `count` buffers of `floats`. The caller has waited for their copies.
void make_buffers(std::vector<Buffer>& buffers, int count, int64_t floats, bool pinned) {
  buffers.clear();
  buffers.resize(size_t(count));
  for (Buffer& b : buffers) {
    b.memory = at::empty({floats}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pinned));
    b.ptr = b.memory.data_ptr<float>();
    b.floats = floats;
  }
}

}  // namespace

// --- OutputOffload -------------------------------------------------------------------------------

struct OutputOffload::Impl {
  struct Task {
    uint64_t seq = 0;  // 1, 2, … in the order queued
    Planar* dst = nullptr;
    bool allocate = false;          // else a chunk, or a gate
    std::shared_future<void> gate;  // valid: a wait (wait()), not a chunk
    int c = 0, t = 0, h = 0, w = 0;
    at::Tensor chunk;
    Region region;
#ifdef WMBATCH_WITH_CUDA
    std::shared_ptr<at::cuda::CUDAEvent> ready;  // the chunk's producing work
#endif
  };
  // A buffer's piece: rows [row0, row0 + rows) of a chunk.
  struct Piece {
    at::Tensor source;  // keeps the chunk alive until its copy is done
    Planar* dst = nullptr;
    Region region;
    int64_t row0 = 0, rows = 0;
    bool last = false;  // of its chunk
    uint64_t seq = 0;   // its chunk's
  };
  // A mark(): signalled once every task up to `seq` is closed.
  struct Ticket final : exec::Completion {
    uint64_t seq = 0;
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    void wait() override {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return done; });
      if (error) std::rethrow_exception(std::exchange(error, nullptr));
    }
    void signal(std::exception_ptr e) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        done = true;
        error = std::move(e);
      }
      cv.notify_all();
    }
  };

  int64_t pool_bytes;
  int buffer_count;
  int max_chunks;

  // Copier thread only.
  std::vector<Buffer> buffers;
  std::vector<Piece> pieces;  // per buffer
  size_t next = 0;
#ifdef WMBATCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> copy_stream;
#endif

  std::mutex mutex;
  std::condition_variable work;  // the copier waits for tasks
  std::condition_variable done;  // producers wait for progress
  std::deque<Task> queue;
  int open_chunks = 0;   // pushed, last piece not yet in its Planar
  bool running = false;  // the copier holds a task
  bool discard = false;
  bool stop = false;
  std::exception_ptr error;
  int64_t staged = 0, pieces_copied = 0;
  uint64_t queued = 0;                          // tasks queued so far (the last seq)
  uint64_t closed_through = 0;                  // every task up to this seq is closed
  std::set<uint64_t> closed_later;              // closed, after a task still open
  std::deque<std::shared_ptr<Ticket>> tickets;  // by seq
  std::thread thread;

  Impl(int64_t pool, int buffers_, int max_chunks_)
      : pool_bytes(pool_or_default(pool)),
        buffer_count(std::max(buffers_, 1)),
        max_chunks(std::max(max_chunks_, 1)) {
    thread = std::thread([this] { main(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
      discard = true;
    }
    work.notify_all();
    thread.join();
  }

  bool idle() const { return queue.empty() && !running && open_chunks == 0; }

  void main() {
    c10::InferenceMode inference;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        work.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) break;  // stopping
        task = std::move(queue.front());
        queue.pop_front();
        running = true;
      }
      bool closed = false;  // the chunk no longer counts as open
      const bool chunk = !task.allocate && !task.gate.valid();
      try {
        if (task.allocate) {
          *task.dst = Planar(task.c, task.t, task.h, task.w);
        } else if (!chunk) {
          task.gate.get();  // rethrows what the destination's allocation hit
        } else {
          closed = copy(task);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      bool more;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (chunk && !closed) --open_chunks;
        if (!chunk || !closed) close(task.seq);
        more = !queue.empty();
      }
      try {
        if (!more) drain_all();  // nothing waits: land what is in flight
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        running = false;
      }
      done.notify_all();
    }
    try {
      drain_all();
    } catch (...) {
    }
  }

  bool discarding() {
    std::lock_guard<std::mutex> lock(mutex);
    return discard || error;
  }

  // Waits for buffer k's copy and writes its piece into the destination.
  void drain(size_t k) {
    Buffer& b = buffers[k];
    if (!b.busy) return;
    const Piece piece = std::exchange(pieces[k], Piece());
    b.busy = false;
    std::exception_ptr failed;
    try {
      b.wait();
      if (!discarding()) {
        copy_rows_parallel(b.ptr, piece.row0, piece.rows, *piece.dst, piece.region);
      }
    } catch (...) {
      failed = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++pieces_copied;
      if (piece.last) --open_chunks;         // closed even when it failed: finish() reports it
      if (failed && !error) error = failed;  // finish() or the chunk's mark reports it
      if (piece.last) close(piece.seq);
    }
    if (piece.last) done.notify_all();
  }
  void drain_all() {
    for (size_t k = 0; k < buffers.size(); ++k) drain((next + k) % buffers.size());  // oldest first
  }

  // Issues the chunk's pieces; true once its last piece is issued (it closes when that drains).
  bool copy(Task& task) {
    if (discarding()) return false;
    if (!fits(task.region, *task.dst)) {
      throw ModelError("OutputOffload: chunk does not fit its destination");
    }
    const bool on_device = task.chunk.is_cuda();
    const Region& r = task.region;
    const int64_t rows = r.rows();
    // The whole chunk in one piece, if the pool allows.
    const int64_t floats = buffer_floats(pool_bytes, buffer_count, rows * r.width);
    if (buffers.empty() || buffers.front().floats < floats) {
      drain_all();
      make_buffers(buffers, buffer_count, floats, on_device);
      pieces.assign(buffers.size(), Piece());
      next = 0;
      std::lock_guard<std::mutex> lock(mutex);
      staged = int64_t(buffers.size()) * floats * int64_t(sizeof(float));
    }
    const int64_t per_piece = std::max<int64_t>(buffers.front().floats / r.width, 1);
    if (per_piece * r.width > buffers.front().floats) {
      throw ModelError("OutputOffload: a row of " + std::to_string(r.width) +
                       " floats does not fit a staging buffer; raise the pinned pool");
    }
    const float* src = task.chunk.data_ptr<float>();
#ifdef WMBATCH_WITH_CUDA
    std::optional<c10::cuda::CUDAGuard> guard;
    if (on_device) {
      const c10::DeviceIndex device = task.chunk.device().index();
      guard.emplace(device);
      if (!copy_stream || copy_stream->device_index() != device) {
        copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
      }
      task.ready->block(*copy_stream);
    }
#endif
    for (int64_t row0 = 0; row0 < rows; row0 += per_piece) {
      const size_t k = next;
      next = (next + 1) % buffers.size();
      drain(k);
      Buffer& b = buffers[k];
      const int64_t n = std::min(per_piece, rows - row0);
      const size_t bytes = size_t(n * r.width) * sizeof(float);
      const float* from = src + size_t(row0 * r.width);
      if (on_device) {
#ifdef WMBATCH_WITH_CUDA
        C10_CUDA_CHECK(
            cudaMemcpyAsync(b.ptr, from, bytes, cudaMemcpyDeviceToHost, copy_stream->stream()));
        b.done.record(*copy_stream);
#endif
      } else {
        std::memcpy(b.ptr, from, bytes);
      }
      b.busy = true;
      pieces[k] = Piece{task.chunk, task.dst, r, row0, n, row0 + n >= rows, task.seq};
    }
    return true;
  }

  void wait_idle(std::unique_lock<std::mutex>& lock) {
    done.wait(lock, [&] { return idle(); });
  }

  // Under the lock: task `seq` is closed (landed, failed or discarded); signals the marks it
  // completes, handing them the error the copies hit so far.
  void close(uint64_t seq) {
    closed_later.insert(seq);
    while (!closed_later.empty() && *closed_later.begin() == closed_through + 1) {
      closed_later.erase(closed_later.begin());
      ++closed_through;
    }
    signal_tickets();
  }
  void signal_tickets() {
    while (!tickets.empty() && tickets.front()->seq <= closed_through) {
      tickets.front()->signal(std::exchange(error, nullptr));
      tickets.pop_front();
    }
  }
};

OutputOffload::OutputOffload(int64_t pool_bytes, int buffers, int max_chunks)
    : impl_(std::make_unique<Impl>(pool_bytes, buffers, max_chunks)) {}

OutputOffload::~OutputOffload() {
  try {
    abandon();
  } catch (...) {
  }
}

void OutputOffload::allocate(Planar& dst, int c, int t, int h, int w) {
  Impl::Task task;
  task.dst = &dst;
  task.allocate = true;
  task.c = c, task.t = t, task.h = h, task.w = w;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    task.seq = ++impl_->queued;
    impl_->queue.push_back(std::move(task));
  }
  impl_->work.notify_one();
}

void OutputOffload::wait(std::shared_future<void> ready) {
  Impl::Task task;
  task.gate = std::move(ready);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    task.seq = ++impl_->queued;
    impl_->queue.push_back(std::move(task));
  }
  impl_->work.notify_one();
}

void OutputOffload::push(const at::Tensor& chunk, Planar& dst, int first_frame, int top, int left) {
  if (chunk.dim() != 4 || chunk.scalar_type() != at::kFloat || !chunk.is_contiguous() ||
      first_frame < 0 || top < 0 || left < 0 || chunk.numel() == 0) {
    throw ModelError("OutputOffload: expected a contiguous float32 [C, n, h, w] chunk");
  }
#ifndef WMBATCH_WITH_CUDA
  if (chunk.is_cuda()) throw ModelError("OutputOffload: CUDA tensor in a build without CUDA");
#endif
  Impl::Task task;
  task.dst = &dst;
  task.chunk = chunk;
  task.region =
      Region{first_frame, top, left, chunk.size(0), chunk.size(1), chunk.size(2), chunk.size(3)};
#ifdef WMBATCH_WITH_CUDA
  if (chunk.is_cuda()) {
    task.ready = std::make_shared<at::cuda::CUDAEvent>();
    task.ready->record(c10::cuda::getCurrentCUDAStream(chunk.device().index()));
  }
#endif
  Impl& m = *impl_;
  {
    std::unique_lock<std::mutex> lock(m.mutex);
    m.done.wait(lock, [&] { return m.open_chunks < m.max_chunks; });
    ++m.open_chunks;
    task.seq = ++m.queued;
    m.queue.push_back(std::move(task));
  }
  m.work.notify_one();
}

void OutputOffload::finish() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mutex);
  m.wait_idle(lock);
  if (m.error) std::rethrow_exception(std::exchange(m.error, nullptr));
}

void OutputOffload::abandon() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mutex);
  m.done.wait(lock, [&] { return m.tickets.empty(); });  // marked work lands
  m.discard = true;
  m.work.notify_one();
  m.wait_idle(lock);
  m.discard = false;
  m.error = nullptr;
}

std::shared_ptr<exec::Completion> OutputOffload::mark() {
  Impl& m = *impl_;
  auto ticket = std::make_shared<Impl::Ticket>();
  std::lock_guard<std::mutex> lock(m.mutex);
  ticket->seq = m.queued;
  m.tickets.push_back(ticket);
  m.signal_tickets();  // nothing open: done at once
  return ticket;
}

int64_t OutputOffload::pool_bytes() const { return impl_->pool_bytes; }

int64_t OutputOffload::staged_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->staged;
}

int64_t OutputOffload::pieces() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->pieces_copied;
}

// --- InputStaging --------------------------------------------------------------------------------

struct InputStaging::Impl {
  Impl(int64_t pool, int buffers_)
      : pool_bytes(pool_or_default(pool)), buffer_count(std::max(buffers_, 1)) {}
  int64_t pool_bytes;
  int buffer_count;
  std::vector<Buffer> buffers;
#ifdef WMBATCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> copy_stream;
#endif
  ~Impl() {
    for (Buffer& b : buffers) {
      try {
        if (b.busy) b.wait();  // the pinned memory must outlive its copies
      } catch (...) {
      }
    }
  }
};

InputStaging::InputStaging(int64_t pool_bytes, int buffers)
    : impl_(std::make_unique<Impl>(pool_bytes, buffers)) {}

InputStaging::~InputStaging() = default;

at::Tensor InputStaging::upload(const Planar& in, at::Device device) {
  const std::vector<int64_t> shape = {1, in.channels, in.frames, in.height, in.width};
  if (!device.is_cuda()) {
    return at::from_blob(const_cast<float*>(in.data.data()), shape, at::kFloat).clone();
  }
#ifndef WMBATCH_WITH_CUDA
  throw ModelError("InputStaging: CUDA device in a build without CUDA");
#else
  Impl& m = *impl_;
  const c10::cuda::CUDAGuard guard(device.index());
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
  if (!m.copy_stream || m.copy_stream->device_index() != device.index()) {
    m.copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  }
  const int64_t total = int64_t(in.data.size());
  for (Buffer& b : m.buffers) {  // the previous upload's last pieces
    if (b.busy) b.wait();
    b.busy = false;
  }
  const int64_t floats =
      buffer_floats(m.pool_bytes, m.buffer_count, (total + m.buffer_count - 1) / m.buffer_count);
  if (m.buffers.empty() || m.buffers.front().floats < floats) {
    make_buffers(m.buffers, m.buffer_count, floats, /*pinned=*/true);
  }
  const int64_t per_piece = m.buffers.front().floats;
  // Allocated in the order of the caller's stream: the copy stream writes it only after the
  // work queued there so far (earlier users of this memory) is done.
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(device));
  at::cuda::CUDAEvent allocated;
  allocated.record(stream);
  allocated.block(*m.copy_stream);
  float* to = out.data_ptr<float>();
  size_t k = 0;
  for (int64_t at = 0; at < total; at += per_piece, k = (k + 1) % m.buffers.size()) {
    Buffer& b = m.buffers[k];
    if (b.busy) b.wait();  // its previous piece has reached the device
    const size_t bytes = size_t(std::min(per_piece, total - at)) * sizeof(float);
    std::memcpy(b.ptr, in.data.data() + at, bytes);
    C10_CUDA_CHECK(
        cudaMemcpyAsync(to + at, b.ptr, bytes, cudaMemcpyHostToDevice, m.copy_stream->stream()));
    b.done.record(*m.copy_stream);
    b.busy = true;
  }
  at::cuda::CUDAEvent copied;
  copied.record(*m.copy_stream);
  copied.block(stream);
  return out;
#endif
}

int64_t InputStaging::pool_bytes() const { return impl_->pool_bytes; }

int64_t InputStaging::staged_bytes() const {
  int64_t bytes = 0;
  for (const Buffer& b : impl_->buffers) bytes += b.floats * int64_t(sizeof(float));
  return bytes;
}

}  // namespace wm::parallel
