// Checkpoint layouts of the Real-ESRGAN networks, apart from their math (realesrgan.cpp): which
// keys and shapes each architecture has, how an architecture is inferred from a file, and how
// the files are read (`.pth` through src/weights/torch_pickle.h: `params_ema`, else `params`, else
// a bare state dict; `.safetensors` with the same keys). Old-ESRGAN key names (`model.0`,
// `model.1.sub.<i>.RDB<j>.conv<k>.0`, ...) are mapped to the official ones.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/models/realesrgan/realesrgan.h"

namespace wm::models {

// Every key of `arch` with its shape, in the order of the upstream state dict.
std::vector<std::pair<std::string, std::vector<int64_t>>> realesrgan_keys(
    const RealEsrganArch& arch);

// The architecture of a set of official-named tensors (name → shape). Throws ModelError
// "PATH: ..." naming what was expected and what was found when it is neither family or a key or
// shape does not fit.
RealEsrganArch infer_realesrgan_arch(const std::map<std::string, std::vector<int64_t>>& shapes,
                                     const std::string& path);

struct RealEsrganWeights {
  RealEsrganArch arch;
  std::map<std::string, at::Tensor> tensors;  // official names, float32, CPU, contiguous
};

// Reads and checks a .pth or .safetensors file. Throws ModelError (exit 65) or InputError (66:
// missing file).
RealEsrganWeights load_realesrgan_weights(const std::string& path);

// Random weights of `arch` (Kaiming-normal convs, small biases, PReLU slopes in 0.05..0.45).
RealEsrganWeights random_realesrgan_weights(const RealEsrganArch& arch, uint64_t seed);

}  // namespace wm::models
