// The CUDA device NVDEC decodes on: the GPU's primary context, the one the CUDA runtime and so
// LibTorch's kernels run in. A context of its own (av_hwdevice_ctx_create's default) made the GPU
// switch between NVDEC's context and the model's: a batch of eight 1080p inputs on one H200 ran
// 47.2 fps with NVDEC against 57.8 in software, its lanes' launches 3.7 s instead of 1.1
// (2026-12-01, docs/gpu.md "NVDEC").
//
// libavutil's AV_CUDA_USE_PRIMARY_CONTEXT flag is not used: FFmpeg 5.1 then sets the primary
// context's scheduling flags and fails when LibTorch has made it already with others. Instead the
// context is retained through the CUDA driver (libcuda.so.1, loaded at run time as libavutil
// loads it: wm_io has no CUDA headers and no CUDA link) and handed to libavutil, which then
// neither makes nor destroys a context. Its copies run on a non-blocking stream of their own, so
// they never wait on work queued on the context's legacy default stream. The stream goes and the
// retain is released when the last reference to the device goes.
#pragma once

#include <string>
#include <utility>

extern "C" {
struct AVBufferRef;
}

namespace wm::io {

// A CUDA AVHWDeviceContext on GPU `device`'s primary context (a new reference), or nullptr with
// `why` set: "cannot load libcuda.so.1", "cuInit failed (CUDA error 100)", ...
AVBufferRef* nvdec_primary_device(int device, std::string& why);

// The CUDA context and stream of a CUDA device reference (CUcontext, CUstream), for checks.
std::pair<const void*, const void*> nvdec_handles(const AVBufferRef* device);

}  // namespace wm::io
