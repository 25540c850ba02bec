// What a device worker gives the model sessions it runs: the interfaces models call for device
// execution. They are declared here, in src/, and implemented in parallel/ (device_context.h,
// offload.h, memory_budget.h, halo_inprocess.h): a model computes; it does not own threads,
// streams, pinned memory, memory budgets or process-wide settings. It asks for them here:
// - streams: the compute stream (current during a worker's call) and side streams;
// - pinned host memory: host_empty();
// - memory: device_memory_cap() for the device, host_memory_available() and hold_host_memory()
//   for the host budget every session and lane of the process shares;
// - LibTorch's process-wide allocator and math settings: DeviceLayer::ask() (model load).
// Include only from LibTorch translation units (models, parallel/).
//
// Threading: a DeviceContext belongs to one worker thread; a session reaches it through
// RunContext::device during run(), on that thread. While the worker runs a call, its device
// is the current device and its compute stream the current stream of that thread (CUDA), so a
// session computes on the current stream and never makes one. A call made outside a worker (a
// tensor job's whole-sequence pass, a test calling a session directly) takes the calling thread's
// context from device_layer().direct_context() and makes its compute stream current itself.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <utility>

#include "src/base/planar.h"
#include "src/exec/memory_hold.h"

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
  // Later pushes land only once `ready` is: a destination allocated elsewhere (a split slice's
  // output, made beside the ranks' work: RunContext::into_ready). Does not block the caller.
  virtual void wait(std::shared_future<void> ready) = 0;
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
  // What sessions on this device may plan with, in bytes: the budget when one is set, else what
  // the device has free plus what LibTorch's allocator holds (its cached blocks are ours to
  // reuse), read now. 0 for the CPU (no limit). A session subtracts what is allocated.
  virtual int64_t device_memory_cap() const = 0;
  // The host memory budget, one for the process (parallel::host_memory: measured once, shared by
  // every session and lane): what a session holding `mine` (or nothing) may plan with, i.e. the
  // budget less what the other sessions hold.
  virtual int64_t host_memory_available(const MemoryHold* mine) const = 0;
  // A share of the host budget for what a session keeps in host memory (causal state, spools);
  // released when dropped. Size it from host_memory_available() first.
  virtual std::unique_ptr<MemoryHold> hold_host_memory(int64_t bytes) = 0;
  // An uninitialised host tensor with the sizes and dtype of `like` (and its strides, for
  // `format` Preserve) for data that copies to and from this device asynchronously: pinned for a
  // CUDA device, plain otherwise.
  virtual at::Tensor host_empty_like(const at::Tensor& like, at::MemoryFormat format) = 0;
  // The stream calls on this device compute on: on a worker's thread the current one during its
  // calls; a direct context's own, which its caller makes current (a CUDAStreamGuard) for the
  // call. CUDA devices only.
  virtual c10::Stream compute_stream() = 0;
  // Side streams of the worker's device for copies beside the compute stream (k = 0, 1: state
  // uploads and write-backs of host-resident causal state). CUDA devices only.
  virtual c10::Stream side_stream(int k) = 0;
};

// What a model asks of the process before it computes on a CUDA device (at load). LibTorch's
// caching allocator and its math flags are process-wide, so the device layer, not the model,
// sets them, each once (DeviceLayer::ask).
// Candidate plans cuDNN's search times per shape by default (the models' `cudnn_benchmark_limit`
// tuning; LibTorch's own is 10). Measured on an H200 (docs/gpu.md, stop 47): the 6th–10th are
// the slow ones, and the fastest is among the first five. Wan2.1 1080p searched 6.9 s instead of
// 77.5 for the same speed after it (23.41 fps against 23.46; 3 lost 3 %), SeedVR2 1080p 11.8 s
// instead of 15.7 (8.90 fps against 8.76). Each worker thread searches anew.
inline constexpr int kCudnnSearchPlans = 5;

struct DeviceSettings {
  // Growable allocator segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, LibTorch >=
  // 2.1; a user's setting wins): chunks of many sizes fragment fixed segments. Read by LibTorch
  // when its allocator first allocates, so ask before the model's first upload.
  bool growable_segments = false;
  // cuDNN's algorithm search per shape (benchmark mode): 1 on, 0 off, -1 no ask.
  int cudnn_benchmark = -1;
  // How many of cuDNN's candidate plans its search times per shape (LibTorch's default 10; 0 no
  // ask). The first model that asks sets it for the process, as for cudnn_benchmark.
  int cudnn_benchmark_limit = 0;
  // Float32 meant exact: no TF32 in cuDNN convolutions / in cuBLAS matrix products.
  bool exact_float32_convs = false;
  bool exact_float32_matmuls = false;
  // Ranks of this process wait for each other on the device (an NCCL group): no cuDNN search
  // from then on. A search times its candidates behind cudaDeviceSynchronize, which waits for the
  // device's NCCL kernels too; they wait for a peer whose thread may be in the same wait, or
  // waiting on the host for this rank (issue 30's second NCCL hang, seen on two H200s: both
  // ranks' threads in cuDNN's search, each GPU's receive waiting for the other's send). Stays on
  // for the process and wins over cudnn_benchmark (cuDNN's heuristics choose the algorithms).
  bool peers_wait_on_device = false;
};

// The device layer as a model reaches it outside a worker's call: at load (settings) and for
// calls made without a worker (RunContext::device null). parallel/ installs it when its LibTorch
// side is linked in or loaded (parallel/torch/device_context.cpp). Thread-safe.
class DeviceLayer {
 public:
  virtual ~DeviceLayer() = default;
  // Applies `settings` to the process. Each setting is decided once: growable segments and the
  // exact-float32 flags, once asked, stay on for the process; cuDNN's benchmark mode is the
  // first ask's, and a later different ask is logged and not followed.
  virtual void ask(const DeviceSettings& settings) = 0;
  // The calling thread's context on `device` for calls made outside a device worker: its own
  // compute stream (not made current) and side streams, the device's budgets, pinned memory.
  // Lives as long as the thread.
  virtual DeviceContext& direct_context(at::Device device) = 0;
};

// The installed device layer (ModelError when none is: a program without wm_parallel_torch).
DeviceLayer& device_layer();
// Called once by parallel/ (its LibTorch side's static initialisation).
void install_device_layer(DeviceLayer* layer);

// A session's context for a call: the worker's (RunContext::device), else the calling thread's
// direct one on `device`.
inline DeviceContext& context_for(DeviceContext* worker, at::Device device) {
  return worker ? *worker : device_layer().direct_context(device);
}

}  // namespace wm::exec
