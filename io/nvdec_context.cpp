#include "io/nvdec_context.h"

#include <dlfcn.h>

#include <new>
#include <string>

#include "io/av_handles.h"

extern "C" {
#include <libavutil/hwcontext.h>
}

// libavutil/hwcontext_cuda.h names CUcontext and CUstream and includes <cuda.h> unless
// CUDA_VERSION is defined: the two handle types are all it needs (the driver's own typedefs).
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
#ifndef CUDA_VERSION
#define CUDA_VERSION 0
#define WM_NVDEC_CONTEXT_DEFINED_CUDA_VERSION
#endif
extern "C" {
#include <libavutil/hwcontext_cuda.h>
}
#ifdef WM_NVDEC_CONTEXT_DEFINED_CUDA_VERSION
#undef CUDA_VERSION
#endif

namespace wm::io {
namespace {

// The driver calls used here, by their exported names (cuda.h maps the unsuffixed names of
// Release, Push, Pop and StreamDestroy to the _v2 symbols since CUDA 4.0 / 11.0).
struct Driver {
  using Init = int (*)(unsigned);
  using DeviceGet = int (*)(int*, int);
  using Retain = int (*)(CUcontext*, int);
  using Release = int (*)(int);
  using Push = int (*)(CUcontext);
  using Pop = int (*)(CUcontext*);
  using StreamCreate = int (*)(CUstream*, unsigned);
  using StreamDestroy = int (*)(CUstream);
  Init init = nullptr;
  DeviceGet device_get = nullptr;
  Retain retain = nullptr;
  Release release = nullptr;
  Push push = nullptr;
  Pop pop = nullptr;
  StreamCreate stream_create = nullptr;
  StreamDestroy stream_destroy = nullptr;
  std::string problem;  // empty: loaded and initialised
};

template <typename F>
void find(void* lib, F& f, const char* name, const char* fallback, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f && fallback) f = reinterpret_cast<F>(dlsym(lib, fallback));
  if (!f && missing.empty()) missing = name;
}

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept for the process
    if (!lib) {
      d.problem = "cannot load libcuda.so.1";
      return d;
    }
    std::string missing;
    find(lib, d.init, "cuInit", nullptr, missing);
    find(lib, d.device_get, "cuDeviceGet", nullptr, missing);
    find(lib, d.retain, "cuDevicePrimaryCtxRetain", nullptr, missing);
    find(lib, d.release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", missing);
    find(lib, d.push, "cuCtxPushCurrent_v2", "cuCtxPushCurrent", missing);
    find(lib, d.pop, "cuCtxPopCurrent_v2", "cuCtxPopCurrent", missing);
    find(lib, d.stream_create, "cuStreamCreate", nullptr, missing);
    find(lib, d.stream_destroy, "cuStreamDestroy_v2", "cuStreamDestroy", missing);
    if (!missing.empty()) {
      d.problem = "libcuda.so.1 has no " + missing;
    } else if (const int rc = d.init(0); rc != 0) {
      d.problem = "cuInit failed (CUDA error " + std::to_string(rc) + ")";
    }
    return d;
  }();
  return loaded;
}

constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING

// What the device holds until its last reference goes.
struct Retained {
  int device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
};

void destroy_stream(const Driver& d, Retained& r) {
  if (!r.stream || d.push(r.context) != 0) return;
  d.stream_destroy(r.stream);
  CUcontext popped = nullptr;
  d.pop(&popped);
  r.stream = nullptr;
}

// AVHWDeviceContext.free: the last reference went (libavutil has let go of the context).
void release(AVHWDeviceContext* device) {
  auto* r = static_cast<Retained*>(device->user_opaque);
  if (!r) return;
  const Driver& d = driver();
  destroy_stream(d, *r);
  d.release(r->device);
  delete r;
  device->user_opaque = nullptr;
}

}  // namespace

AVBufferRef* nvdec_primary_device(int device, std::string& why) {
  const Driver& d = driver();
  if (!d.problem.empty()) {
    why = d.problem;
    return nullptr;
  }
  auto retained = new Retained;
  int rc = d.device_get(&retained->device, device);
  if (rc == 0) rc = d.retain(&retained->context, retained->device);
  if (rc != 0) {
    why = "no primary context (CUDA error " + std::to_string(rc) + ")";
    delete retained;
    return nullptr;
  }
  if ((rc = d.push(retained->context)) == 0) {
    rc = d.stream_create(&retained->stream, kStreamNonBlocking);
    CUcontext popped = nullptr;
    d.pop(&popped);
  }
  if (rc != 0) {
    why = "cannot make a stream (CUDA error " + std::to_string(rc) + ")";
    d.release(retained->device);
    delete retained;
    return nullptr;
  }
  AVBufferRef* ref = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
  if (!ref) {
    destroy_stream(d, *retained);
    d.release(retained->device);
    delete retained;
    throw std::bad_alloc();
  }
  auto* hw = reinterpret_cast<AVHWDeviceContext*>(ref->data);
  auto* cuda = static_cast<AVCUDADeviceContext*>(hw->hwctx);
  cuda->cuda_ctx = retained->context;
  cuda->stream = retained->stream;
  hw->user_opaque = retained;
  hw->free = release;  // from here on, unref releases it
  if ((rc = av_hwdevice_ctx_init(ref)) < 0) {
    av_buffer_unref(&ref);
    why = "libavutil cannot use it: " + av_error_string(rc);
    return nullptr;
  }
  return ref;
}

std::pair<const void*, const void*> nvdec_handles(const AVBufferRef* device) {
  const auto* hw = reinterpret_cast<const AVHWDeviceContext*>(device->data);
  const auto* cuda = static_cast<const AVCUDADeviceContext*>(hw->hwctx);
  return {cuda->cuda_ctx, cuda->stream};
}

}  // namespace wm::io
