// The LibTorch side of the device frame path (frame_path.h): host block pools, the copies on the
// worker's side streams, the conversions and the model call on its compute stream, the events
// that time each step.
#include "parallel/frame_path_device.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/log_text.h"
#include "src/exec/device_context.h"
#include "src/exec/device_frames.h"
#include "src/models/torch/tensor.h"
#include "src/models/torch/yuv_colour.h"

namespace wm::parallel {
namespace {

constexpr const char* kLogger = "frame_path";

// Host blocks of one size, pinned for a GPU. Blocks go back to the pool when their last
// reference goes (any thread); the pool outlives them (each holds a reference to it).
class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  BlockPool(const YuvLayout& layout, int capacity, bool pinned, int most)
      : layout_(layout), capacity_(capacity), pinned_(pinned), most_(most) {}
  ~BlockPool() {
    for (auto& slot : slots_) {  // uploads still reading a block's memory
      try {
        if (slot->block.wait_reuse) slot->block.wait_reuse();
      } catch (...) {
      }
    }
  }

  // A free block, a new one while there are fewer than `most` (0: no limit), else waits for one.
  std::shared_ptr<HostBlock> take() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!free_.empty()) {
        Slot* slot = free_.back();
        free_.pop_back();
        lock.unlock();
        return hand_out(slot);
      }
      if (most_ <= 0 || int(slots_.size()) < most_) break;
      freed_.wait(lock);
    }
    slots_.push_back(std::make_unique<Slot>());
    Slot* slot = slots_.back().get();
    lock.unlock();
    const int64_t bytes = int64_t(layout_.frame_bytes) * capacity_;
    slot->memory = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned_));
    slot->block.data = slot->memory.data_ptr<uint8_t>();
    slot->block.layout = layout_;
    slot->block.capacity = capacity_;
    return hand_out(slot);
  }

  int blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return int(slots_.size());
  }

 private:
  struct Slot {
    at::Tensor memory;
    HostBlock block;
  };

  std::shared_ptr<HostBlock> hand_out(Slot* slot) {
    if (slot->block.wait_reuse) {
      std::function<void()> wait = std::move(slot->block.wait_reuse);
      slot->block.wait_reuse = nullptr;
      wait();
    }
    slot->block.frames = 0;
    std::shared_ptr<BlockPool> self = shared_from_this();
    return std::shared_ptr<HostBlock>(&slot->block, [self, slot](HostBlock*) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->free_.push_back(slot);
      self->freed_.notify_one();
    });
  }

  YuvLayout layout_;
  int capacity_;
  bool pinned_;
  int most_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
};

// A slice on the CPU: done when launch() returns.
class HostSlice final : public LaunchedSlice {
 public:
  void wait() override {}
  SliceTimes times() const override { return times_; }
  SliceTimes times_;
};

#ifdef WMBATCH_WITH_CUDA
// Events with timing (ATen's default events have none).
at::cuda::CUDAEvent timing_event() { return at::cuda::CUDAEvent(cudaEventDefault); }
// An event a host thread waits for: it sleeps until the device is there. The default events
// spin a core while they wait (CUDA spins while a process has fewer contexts than cores), and on
// an encode-bound batch the lanes' waits for their downloads took cores from the encoders
// (stage_wait_device_seconds: 2.9 s of a 4.8 s batch on 4 lanes).
at::cuda::CUDAEvent waited_event(bool timing) {
  return at::cuda::CUDAEvent(cudaEventBlockingSync |
                             (timing ? 0u : unsigned(cudaEventDisableTiming)));
}

double elapsed(const at::cuda::CUDAEvent& a, const at::cuda::CUDAEvent& b) {
  return double(a.elapsed_time(b)) / 1000.0;
}

// A slice on a GPU: its download's end event says when it is in.
class DeviceSlice final : public LaunchedSlice {
 public:
  DeviceSlice()
      : upload_start(timing_event()),
        upload_end(timing_event()),
        convert_start(timing_event()),
        convert_end(timing_event()),
        download_start(timing_event()),
        download_end(waited_event(/*timing=*/true)) {}
  ~DeviceSlice() override {
    try {  // the download may still be writing into its block
      if (!done_) download_end.synchronize();
    } catch (...) {
    }
  }
  void wait() override {
    models::guarded("device frame path", [&] { download_end.synchronize(); });
    done_ = true;
  }
  SliceTimes times() const override {
    if (!done_) return {};
    SliceTimes t;
    t.upload = elapsed(upload_start, upload_end);
    t.convert = elapsed(convert_start, convert_end);
    for (const auto& [a, b] : model) t.model += elapsed(a, b);
    for (const auto& [a, b] : convert_back) t.convert_back += elapsed(a, b);
    t.download = elapsed(download_start, download_end);
    return t;
  }

  at::cuda::CUDAEvent upload_start, upload_end, convert_start, convert_end;
  std::vector<std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>> model, convert_back;
  at::cuda::CUDAEvent download_start, download_end;
  at::Tensor keep;  // the device output, until the download is done

 private:
  bool done_ = false;
};
#endif

class FramePathImpl final : public FramePath {
 public:
  FramePathImpl(const exec::DeviceFrameModel& model, const Device& device,
                const FramePathConfig& config)
      : model_(model), device_(device), config_(config) {
    const at::Device d = models::to_device(device);
    in_ = std::make_unique<models::YuvConverter>(config.input, kInputRowAlign, d);
    out_ = std::make_unique<models::YuvConverter>(config.output, kOutputRowAlign, d);
    const bool pinned = device.kind == Device::Kind::kCuda;
    const int frames = std::max(config.slice_frames, 1);
    inputs_ =
        std::make_shared<BlockPool>(in_->layout(), frames, pinned, std::max(config.tokens, 1));
    outputs_ = std::make_shared<BlockPool>(out_->layout(), frames, pinned, 0);
    model_width_ = config.model_width > 0 ? config.model_width : config.output.width;
    model_height_ = config.model_height > 0 ? config.model_height : config.output.height;
  }

  std::shared_ptr<HostBlock> input_block() override { return inputs_->take(); }

  std::unique_ptr<LaunchedSlice> launch(std::shared_ptr<HostBlock> input,
                                        exec::DeviceContext& context) override {
    return models::guarded("device frame path", [&]() -> std::unique_ptr<LaunchedSlice> {
      c10::InferenceMode inference;
      if (input->frames <= 0 || input->frames > input->capacity) {
        throw Error("device frame path: a slice of " + std::to_string(input->frames) +
                        " frames in a block of " + std::to_string(input->capacity),
                    kExitSoftware);
      }
#ifdef WMBATCH_WITH_CUDA
      if (device_.kind == Device::Kind::kCuda) return launch_cuda(std::move(input), context);
#endif
      return launch_host(std::move(input), context);
    });
  }

 private:
  // The slice's packed device frames → the packed output frames (on the current stream), the
  // model in calls that fit: a call out of memory is halved, as `tiling: auto` does.
  template <typename Mark>
  at::Tensor compute(const at::Tensor& packed, int64_t cap, Mark&& mark) {
    const int64_t frames = packed.size(0);
    const at::Tensor rgb = in_->to_rgb(packed, model_.frame_dtype());
    mark(0);
    at::Tensor out = at::empty({frames, int64_t(out_->layout().frame_bytes)},
                               at::TensorOptions().dtype(at::kByte).device(packed.device()));
    int64_t per_call = std::max<int64_t>(
        1, model_.frames_per_call(frames, config_.input.height, config_.input.width, cap));
    for (int64_t f0 = 0; f0 < frames;) {
      const int64_t n = std::min(per_call, frames - f0);
      try {
        mark(1);
        at::Tensor y = model_.upscale_frames(rgb.narrow(0, f0, n));
        if (y.size(2) != model_height_ || y.size(3) != model_width_ ||
            y.size(2) < config_.output.height || y.size(3) < config_.output.width) {
          throw Error("device frame path: the model made " + std::to_string(y.size(3)) + "x" +
                          std::to_string(y.size(2)) + " frames, expected " +
                          std::to_string(model_width_) + "x" + std::to_string(model_height_),
                      kExitSoftware);
        }
        if (y.size(2) != config_.output.height || y.size(3) != config_.output.width) {
          y = y.narrow(2, 0, config_.output.height).narrow(3, 0, config_.output.width);
        }
        mark(2);
        out.narrow(0, f0, n).copy_(out_->from_rgb(y, config_.dither));
        mark(3);
        f0 += n;
      } catch (const c10::OutOfMemoryError& e) {
        if (n <= 1) {
          std::string why = e.what_without_backtrace();
          why = why.substr(0, why.find('\n'));
          throw ModelError("device frame path: one frame does not fit the device (" + why +
                               "); `frame_path: host` with `tiling: auto` cuts frames into tiles",
                           kExitFailure);
        }
        per_call = (n + 1) / 2;
        log::warn(kLogger, "out of device memory; " + std::to_string(per_call) +
                               " frame(s) per call from frame " + std::to_string(f0));
#ifdef WMBATCH_WITH_CUDA
        if (device_.kind == Device::Kind::kCuda) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
      }
    }
    return out;
  }

  std::unique_ptr<LaunchedSlice> launch_host(std::shared_ptr<HostBlock> input,
                                             exec::DeviceContext& context) {
    auto slice = std::make_unique<HostSlice>();
    const int64_t frames = input->frames;
    Clock::time_point t = Clock::now();
    const at::Tensor packed =
        at::from_blob(input->data, {frames, int64_t(in_->layout().frame_bytes)}, at::kByte).clone();
    slice->times_.upload = seconds_since(t);
    input.reset();
    t = Clock::now();
    const at::Tensor out = compute(packed, context.device_memory_cap(), [&](int step) {
      const double s = seconds_since(t);
      t = Clock::now();
      if (step == 0) slice->times_.convert += s;
      if (step == 2) slice->times_.model += s;
      if (step == 3) slice->times_.convert_back += s;
    });
    t = Clock::now();
    slice->output = outputs_->take();
    slice->output->frames = int(frames);
    std::memcpy(slice->output->data, out.data_ptr<uint8_t>(), size_t(out.numel()));
    slice->times_.download = seconds_since(t);
    return slice;
  }

#ifdef WMBATCH_WITH_CUDA
  std::unique_ptr<LaunchedSlice> launch_cuda(std::shared_ptr<HostBlock> input,
                                             exec::DeviceContext& context) {
    const c10::cuda::CUDAGuard guard(c10::DeviceIndex(device_.index));
    const c10::cuda::CUDAStream compute_stream = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream up(context.side_stream(0));
    const c10::cuda::CUDAStream down(context.side_stream(1));
    auto slice = std::make_unique<DeviceSlice>();
    const int64_t frames = input->frames;
    const size_t in_bytes = in_->layout().frame_bytes * size_t(frames);

    // Upload: the device buffer is allocated in the compute stream's order, so the copy stream
    // writes it only after the work queued there so far (earlier users of that memory) is done.
    at::Tensor packed = at::empty({frames, int64_t(in_->layout().frame_bytes)},
                                  at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    at::cuda::CUDAEvent allocated;
    allocated.record(compute_stream);
    allocated.block(up);
    slice->upload_start.record(up);
    C10_CUDA_CHECK(cudaMemcpyAsync(packed.data_ptr(), input->data, in_bytes, cudaMemcpyHostToDevice,
                                   up.stream()));
    slice->upload_end.record(up);
    packed.record_stream(up.unwrap());
    // The block may be filled again once its upload is done.
    auto uploaded = std::make_shared<at::cuda::CUDAEvent>(waited_event(/*timing=*/false));
    uploaded->record(up);
    input->wait_reuse = [uploaded] { uploaded->synchronize(); };
    input.reset();
    slice->upload_end.block(compute_stream);

    slice->convert_start.record(compute_stream);
    bool converted = false;
    std::optional<at::cuda::CUDAEvent> model_start, back_start;
    const at::Tensor out = compute(packed, context.device_memory_cap(), [&](int step) {
      if (step == 0 && !converted) {
        slice->convert_end.record(compute_stream);
        converted = true;
      } else if (step == 1) {
        model_start.emplace(timing_event());
        model_start->record(compute_stream);
      } else if (step == 2) {
        at::cuda::CUDAEvent end = timing_event();
        end.record(compute_stream);
        slice->model.emplace_back(std::move(*model_start), std::move(end));
        model_start.reset();
        back_start.emplace(timing_event());
        back_start->record(compute_stream);
      } else if (step == 3) {
        at::cuda::CUDAEvent end = timing_event();
        end.record(compute_stream);
        slice->convert_back.emplace_back(std::move(*back_start), std::move(end));
        back_start.reset();
      }
    });

    // Download on the other side stream, into a pinned block the encoder takes as it is.
    at::cuda::CUDAEvent computed;
    computed.record(compute_stream);
    computed.block(down);
    slice->output = outputs_->take();
    slice->output->frames = int(frames);
    slice->download_start.record(down);
    C10_CUDA_CHECK(cudaMemcpyAsync(slice->output->data, out.data_ptr(), size_t(out.numel()),
                                   cudaMemcpyDeviceToHost, down.stream()));
    slice->download_end.record(down);
    out.record_stream(down.unwrap());
    slice->keep = out;
    return slice;
  }
#endif

  const exec::DeviceFrameModel& model_;
  Device device_;
  FramePathConfig config_;
  std::unique_ptr<models::YuvConverter> in_, out_;
  std::shared_ptr<BlockPool> inputs_, outputs_;
  int model_width_ = 0, model_height_ = 0;
};

}  // namespace

std::unique_ptr<FramePath> make_frame_path_device(const Model& model, const Device& device,
                                                  const FramePathConfig& config) {
  const auto* frames = dynamic_cast<const exec::DeviceFrameModel*>(&model);
  if (!frames) {
    throw Error(model.traits().name + ": takes no frames on its device (device frame path)",
                kExitSoftware);
  }
  return std::make_unique<FramePathImpl>(*frames, device, config);
}

}  // namespace wm::parallel
