// The model-only benchmark of Real-ESRGAN (realesrgan_bench_support.h): the network alone on
// device-resident random frames, timed after warm-up calls, optionally replayed as a CUDA graph.
#include "src/models/realesrgan/realesrgan_bench_support.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "src/exec/device_context.h"
#include "src/models/bench_support.h"
#include "src/models/realesrgan/torch/realesrgan_network.h"
#include "src/models/realesrgan/torch/realesrgan_weights.h"
#include "src/models/resample/torch/lanczos_resize.h"
#include "src/models/torch/tensor.h"

namespace wm::models {

namespace {

void synchronize(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

}  // namespace

RealEsrganBench bench_realesrgan(const RealEsrganArch& arch, const Device& device,
                                 Precision precision, int frames, int height, int width, int calls,
                                 int warmup, const std::string& tuning_text, int out_scale,
                                 const std::string& trace) {
  const RealEsrganTuning tuning = RealEsrganTuning::parse(tuning_text);
  return guarded("realesrgan bench", [&] {
    c10::InferenceMode inference;
    const bool cuda = device.kind == Device::Kind::kCuda;
    if (cuda) {
      exec::DeviceSettings settings;
      settings.exact_float32_convs = precision == Precision::kFloat32;
      settings.cudnn_benchmark = tuning.benchmark ? 1 : 0;
      exec::device_layer().ask(settings);
    }
    const at::ScalarType dtype = to_scalar_type(precision);
    const std::unique_ptr<RealEsrganNetwork> network = make_realesrgan_network(
        random_realesrgan_weights(arch, 1234), to_device(device), dtype, cuda, tuning);
    const RealEsrganNetwork& net = *network;
    at::Tensor x = at::rand({frames, 3, height, width}, at::kFloat).to(to_device(device), dtype);
    if (cuda) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    std::function<at::Tensor()> step = [&] { return net.forward(x); };
    if (out_scale > 0) {
      step = [&] {
        const at::Tensor y = net.forward(x, /*out_float=*/true);
        if (out_scale == arch.scale) return y;
        return lanczos_resize(y, height * out_scale, width * out_scale);
      };
    }
    at::Tensor y;
    for (int i = 0; i < std::max(warmup, 1); ++i) y = step();
    synchronize(device);
#ifdef WMBATCH_WITH_CUDA
    // CUDA graph: the forward pass captured once on a side stream (after the warm-up calls,
    // so cuDNN's algorithm search is done) and replayed; input and output stay where the
    // capture put them.
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    at::Tensor graph_out;
    if (cuda && tuning.graph) {
      graph = std::make_unique<at::cuda::CUDAGraph>();
      const at::cuda::CUDAStream side(
          exec::device_layer().direct_context(to_device(device)).side_stream(0));
      {
        at::cuda::CUDAStreamGuard guard(side);
        graph->capture_begin();
        graph_out = net.forward(x);
        graph->capture_end();
      }
      synchronize(device);
      step = [&] {
        graph->replay();
        return graph_out;
      };
      y = step();
      synchronize(device);
    }
#endif
    reset_peak_device_memory(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) y = step();
    synchronize(device);
    RealEsrganBench b;
    b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    b.fps = double(frames) * calls / b.seconds;
    b.tflops = arch.flops_per_input_pixel() * height * width * frames * calls / b.seconds / 1e12;
    b.peak_mib = peak_device_memory_mib(device);
    b.output_mean = y.to(at::kFloat).mean().item<double>();
    if (!trace.empty()) {
      b.activity = measure_gpu_activity(
          [&] {
            for (int i = 0; i < 2; ++i) y = step();
            synchronize(device);
          },
          trace);
    }
    return b;
  });
}

}  // namespace wm::models
