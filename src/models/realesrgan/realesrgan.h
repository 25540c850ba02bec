// Real-ESRGAN upscalers (kind `realesrgan`): SRVGGNetCompact (realesr-animevideov3,
// realesr-general-x4v3) and RRDBNet (RealESRGAN_x4plus, RealESRGAN_x2plus,
// RealESRGAN_x4plus_anime_6B), computed natively with ATen from the released `.pth` files
// (read by src/weights/torch_pickle.h, never by Python's pickle) or `.safetensors` files with the
// same keys. The architecture is inferred from the keys and shapes (realesrgan_weights.h); the
// layer sequences follow ../shared/upscalers-spec.md.
//
// Input and output are RGB in 0..1 as the official scripts feed them; the output is not clamped
// here (the video sink clamps when it writes; the tensor path keeps the raw values). The ×2 (and
// ×1) RRDB pads odd sizes right/bottom by reflection and crops, as the official wrapper does.
// A `scale:` other than the network's resizes the network's output with a Lanczos-3 filter.
//
// Tiles: SRVGG's halo (num_conv + 2 input pixels) is exact. RRDB's exact halo (15·blocks + 4,
// doubled for ×2) is large (349 px for x4plus), so by default RRDB declares a 16-pixel approximate
// halo (32 for ×2) and tiles are blended; the job's `tiling.exact: true` selects the exact one.
//
// Torch-free header: the registry and the benchmark include it (the benchmark's entry:
// realesrgan_bench_support.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/model.h"

namespace wm::models {

// Options of kind realesrgan beyond ModelConfig's weights and precision.
struct RealEsrganOptions : ModelOptions {
  int scale = 0;  // output scale; 0 = the network's
  std::string text() const override { return "scale " + std::to_string(scale) + "\n"; }
};

// Execution choices of the GPU path, "key=value,..." (the job's `model.tuning`, wmbench
// --tuning): speed only, never the function computed (half-precision rounding aside).
//   fused=1      own CUDA kernels for the memory-bound passes (RRDB dense-block concat +
//                activation + residuals, SRVGG pixel shuffle + upsampled add); fp16/bf16 only
//   benchmark=1  cuDNN benchmark mode (an algorithm search per new shape; process-wide)
//   graph=0      (wmbench only) replay the timed forward pass as a CUDA graph
//   conv=own     our own 3×3 convolution kernel (src/models/kernels/conv3x3_kernels.cu: bias,
//                activation and residuals in its epilogue) on the fused path where it measured
//                faster than cuDNN + the separate passes: SRVGG's body convolutions and RRDB's
//                dense-block convolutions 1–4; RRDB's conv5 (F + 4G → F) stays on cuDNN + one
//                in-place pass. conv=own-all: conv5 on our kernel too (its residual sums in the
//                epilogue). conv=cudnn: every convolution through cuDNN (ATen) + the fused passes
struct RealEsrganTuning {
  // kFused (the default): cuDNN's graph API with our epilogue fused for the 64-channel
  // convolutions, our kernel for RRDB's 32-channel ones (cudnn_fused_conv.h); kOwn: our kernel
  // where it takes the shape, ATen elsewhere; kOwnAll: RRDB's conv5 on our kernel too; kCudnn:
  // ATen's convolutions with the fused passes after them.
  enum class Conv { kFused, kOwn, kOwnAll, kCudnn };
  bool fused = true;
  bool benchmark = true;
  bool graph = false;
  Conv conv = Conv::kFused;
  // Throws ModelError naming an unknown key or a bad value.
  static RealEsrganTuning parse(const std::string& text);
  std::string str() const;
};

// One network's architecture, as inferred from a file or named by a preset.
struct RealEsrganArch {
  enum class Family { kSrvgg, kRrdb } family = Family::kSrvgg;
  int features = 64;  // num_feat
  int convs = 16;     // SRVGG: num_conv (body convs between the first and the last)
  int blocks = 23;    // RRDB: num_block
  int growth = 32;    // RRDB: num_grow_ch
  int scale = 4;      // the network's own scale
  // "SRVGGNetCompact(features 64, convs 16, PReLU, x4)" / "RRDBNet(features 64, blocks 23, ...)".
  std::string describe() const;
  // Input pixels a tile needs on each side to reproduce the untiled output exactly.
  int exact_halo() const;
  // Multiply-adds ×2 per input pixel of the convolutions (for TFLOP/s reports).
  double flops_per_input_pixel() const;
};

// The architectures of the official releases by name: realesr-animevideov3,
// realesr-general-x4v3, RealESRGAN_x4plus, RealESRGAN_x2plus, RealESRGAN_x4plus_anime_6B.
// Throws ModelError for another name.
RealEsrganArch realesrgan_preset(const std::string& name);

// Builds kind realesrgan from config.weights (options: RealEsrganOptions). Throws ModelError
// (exit 65) naming the file for a file that is neither architecture or does not load.
std::unique_ptr<Model> make_realesrgan(const ModelConfig& config, const Device& device);
// The architecture `arch` with random weights (seeded), for benchmarks.
std::unique_ptr<Model> make_realesrgan_random(const RealEsrganArch& arch, const ModelConfig& config,
                                              const Device& device, uint64_t seed);

// Random weights of `arch` written as a .safetensors file with the official key names (what an
// end-to-end benchmark job loads).
void write_random_realesrgan(const RealEsrganArch& arch, const std::string& path, uint64_t seed);

}  // namespace wm::models
