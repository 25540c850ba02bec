// Real-ESRGAN's benchmark support (tools/bench_upscale.cpp, tools/bench_e2e.cpp), behind a
// torch-free interface so tools need no LibTorch headers. Implemented in
// torch/realesrgan_bench_support.cpp; the helpers every family's bench uses are in
// src/models/bench_support.h.
#pragma once

#include <string>

#include "src/model.h"
#include "src/models/bench_support.h"
#include "src/models/realesrgan/realesrgan.h"

namespace wm::models {

// Model-only speed: the network of `arch` (random weights) on device-resident random frames,
// `frames` per call of height × width, after `warmup` calls; no host transfers, no tiles.
struct RealEsrganBench {
  double seconds = 0;      // of the timed calls
  double fps = 0;          // frames per second
  double tflops = 0;       // achieved, from RealEsrganArch::flops_per_input_pixel
  double peak_mib = -1;    // device memory (CUDA), -1 elsewhere
  double output_mean = 0;  // of the last output (a check that it ran)
  GpuActivity activity;    // of two more calls, with a non-empty `trace` (CUDA, LibTorch 2)
};
// With `out_scale` > 0: as a job runs the model (float32 output, and the Lanczos resize to
// out_scale where it is not the network's own scale). A non-empty `trace`: two more calls, untimed,
// under the profiler, whose Chrome trace is written there (tools/gpu-checks/trace_summary.py
// lists where the GPU's time goes, kernel by kernel).
RealEsrganBench bench_realesrgan(const RealEsrganArch& arch, const Device& device,
                                 Precision precision, int frames, int height, int width, int calls,
                                 int warmup, const std::string& tuning = "", int out_scale = 0,
                                 const std::string& trace = "");

}  // namespace wm::models
