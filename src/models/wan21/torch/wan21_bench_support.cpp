#include "src/models/wan21/wan21_bench_support.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "src/models/wan21/torch/wan21_blocks.h"

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include "src/base/error.h"
#include "src/models/kernels/torch/cuda_kernels.h"
#endif

namespace wm::models {

void set_wan21_profiling(bool on) { wan21::set_profiling(on); }

std::vector<StageTiming> take_wan21_stage_timings() {
  std::vector<StageTiming> out;
  for (const wan21::StageTime& s : wan21::take_profile()) {
    out.push_back({s.name, s.ms, s.conv_ms, s.flops, s.peak_mib, s.calls});
  }
  return out;
}

std::string wan21_tuning(const std::string& text) { return wan21::Tuning::parse(text).str(); }

std::vector<KernelRate> wan21_kernel_rates(const Device& device, Precision precision, int height,
                                           int width) {
  std::vector<KernelRate> rates;
#ifdef WMBATCH_WITH_CUDA
  if (device.kind != Device::Kind::kCuda) return rates;
  const at::ScalarType dtype = precision == Precision::kBFloat16  ? at::kBFloat16
                               : precision == Precision::kFloat16 ? at::kHalf
                                                                  : at::kFloat;
  const auto opts = at::TensorOptions()
                        .device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index))
                        .dtype(dtype)
                        .memory_format(at::MemoryFormat::ChannelsLast3d);
  const int64_t frames = 4, margin = 16;
  const int64_t elt = at::elementSize(dtype);
  for (int64_t scale : {1, 2, 4}) {
    const int64_t c = 96 * scale, h = height / scale, w = width / scale;
    const int64_t nvec = c * elt / 16;
    for (bool crop : {false, true}) {
      // A crop: the middle of a tensor `margin` pixels larger on each side.
      auto make = [&]() {
        if (!crop) return at::empty({1, c, frames, h, w}, opts).normal_();
        return at::empty({1, c, frames, h + 2 * margin, w + 2 * margin}, opts)
            .normal_()
            .narrow(3, margin, h)
            .narrow(4, margin, w);
      };
      const at::Tensor x = make(), res = make();
      const at::Tensor gamma = at::ones({c}, opts.memory_format(at::MemoryFormat::Contiguous));
      const at::Tensor bias = at::zeros({c}, gamma.options());
      at::Tensor buf = at::empty({1, c, frames + 2, h, w}, opts);
      const at::Tensor body = buf.narrow(2, 2, frames);
      at::Tensor y = at::empty({1, c, frames, h, w}, opts).normal_();
      for (int threads : {0, 1, 2, 4, 8, 16, 32}) {
        if (threads > 0 && (nvec + threads - 1) / threads > 8) continue;
        if (crop && threads != 0) continue;
        for (const std::string kind : {"norm", "sum"}) {
          auto once = [&]() {
            const bool ok = kind == "norm"
                                ? cuda::rms_norm(x, {}, {}, gamma, body, {}, true, 1e-12, threads)
                                : cuda::rms_norm(y, bias, res, {}, {}, y, false, 1e-12, threads);
            if (!ok) throw ModelError("kernel rates: the fused kernel refused its arguments");
          };
          once();
          const int iters = 10;
          at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
          const auto stream = c10::cuda::getCurrentCUDAStream(x.get_device());
          start.record(stream);
          for (int i = 0; i < iters; ++i) once();
          stop.record(stream);
          stop.synchronize();
          const double ms = double(start.elapsed_time(stop)) / iters;
          const double bytes = double(x.numel()) * double(elt) * (kind == "norm" ? 2 : 3);
          rates.push_back({kind, c, threads, crop, ms, bytes / (ms * 1e-3) / 1e9});
        }
      }
    }
  }
#else
  (void)device;
  (void)precision;
  (void)height;
  (void)width;
#endif
  return rates;
}

}  // namespace wm::models
