// The LibTorch side's table for the models (torch_side.h): its one entry point, wm_torch_models.
#include <ATen/ATen.h>

#include "src/models/aoti.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/resample/resample.h"
#include "src/models/resample/torch/lanczos_resize.h"
#include "src/models/seedvr2/seedvr2_upscale.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/torch/tensor.h"
#include "src/models/torch_side.h"
#include "src/models/torchscript.h"
#include "src/models/wan21/wan21_vae.h"

namespace wm::models {
namespace {

Planar resize_plane(const Planar& plane, int width, int height) {
  return guarded("alpha resize", [&] {
    const at::Tensor x = to_tensor(plane.clone()).view({1, 1, plane.height, plane.width});
    return to_planar(lanczos_resize(x, height, width).view({1, 1, height, width}));
  });
}

TorchModels make_table() {
  TorchModels t;
  t.make_realesrgan = make_realesrgan;
  t.make_torchscript = make_torchscript;
  t.make_aoti = make_aoti;
  t.make_wan21_vae = make_wan21_vae;
  t.make_seedvr2_vae = make_seedvr2_vae;
  t.make_seedvr2 = make_seedvr2;
  t.resample_torch = resample_torch;
  t.resize_plane = resize_plane;
  return t;
}

}  // namespace
}  // namespace wm::models

// Called once per process by torch_models() (src/models/torch_side.cpp).
extern "C" const wm::models::TorchModels* wm_torch_models() {
  // LibTorch's CPU ops get every core from the start (Debian's build starts with one thread).
  wm::models::use_all_cpu_threads();
  static const wm::models::TorchModels table = wm::models::make_table();
  return &table;
}
