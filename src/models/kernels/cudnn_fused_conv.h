// A 3×3 convolution with its epilogue fused by cuDNN's runtime fusion (the graph API): the
// convolution, the bias, the activation and the residual sums as one operation graph, which cuDNN
// compiles into one kernel — its convolution main loop (the fastest at 64 output channels on
// Hopper: ~460 TFLOP/s against our own kernel's ~310) with our epilogue, so the activations make
// one trip through memory (docs/gpu.md, "Real-ESRGAN upscalers").
//
// Same arguments, layout and arithmetic as our own kernel (conv3x3_launch.h: pixel-major
// fp16/bf16, a weight [Cout][3][3][Cin], an input that may be the first Cin channels of a wider
// buffer; y = conv + bias, PReLU / leaky ReLU, y = r1 + alpha1·y, y = r2 + alpha2·y, written to
// every destination), up to rounding (float32 inside, one rounding at the store), with two
// limits: at most two destinations, and none may alias the input or a residual (a plan is timed
// on the caller's tensors when it is built, so the call must be repeatable).
//
// Plans are built once per shape, device and thread (cuDNN handles are per thread), tried over
// the heuristics' engine configurations and the fastest kept (a few milliseconds, once). Plain
// pointers, no LibTorch types; the .cu file builds with nvcc and links cuDNN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "src/models/kernels/conv3x3_launch.h"

typedef struct cudnnContext* cudnnHandle_t;

namespace wm::models::cuda {

// Device memory the plans need as scratch: `bytes` on the stream's device, valid until the
// stream's work queued so far is done (a caching allocator's block). May be called with 0.
using CudnnWorkspace = std::function<void*(size_t bytes)>;

// Whether cuDNN can run this fused (a plan builds for it). `prelu_in_unit` says every PReLU slope
// is in [0, 1], where PReLU is max(y, a·y) (one operation less than the general form).
// Returns cudaErrorNotSupported when no engine takes the graph (nothing launched, the caller
// falls back), cudaErrorInvalidValue for arguments it does not take, another error on failure.
cudaError_t launch_conv3x3_cudnn(cudnnHandle_t handle, EsrganDType dtype, const Conv3x3Args& args,
                                 bool prelu_in_unit, cudaStream_t stream,
                                 const CudnnWorkspace& workspace);

// What the plan chosen for `args` is (for benchmarks): the engine's name or number and its
// workspace; empty before the first launch of that shape.
struct CudnnPlanInfo {
  int64_t engine = -1;
  int64_t workspace_bytes = 0;
  int configs_tried = 0;
  double best_ms = 0;
  int choice = -1;  // the config's position in the heuristics' list
};
CudnnPlanInfo cudnn_conv3x3_plan_info(EsrganDType dtype, const Conv3x3Args& args,
                                      bool prelu_in_unit);

}  // namespace wm::models::cuda
