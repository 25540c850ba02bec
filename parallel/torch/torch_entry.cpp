// The LibTorch side's table for the device layer (torch_side.h): its one entry point,
// wm_torch_devices.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <string>

#include "parallel/device_context.h"
#include "parallel/frame_path_device.h"
#include "parallel/halo_inprocess.h"
#include "parallel/halo_nccl.h"
#include "parallel/torch/cpu_pinning.h"
#include "parallel/torch_side.h"
#include "src/base/error.h"

namespace wm::parallel {
namespace {

int count_cuda_devices() { return static_cast<int>(torch::cuda::device_count()); }

std::unique_ptr<ExchangeGroup> inprocess_group(int ranks, std::chrono::milliseconds timeout) {
  return std::make_unique<InProcessGroup>(ranks, timeout);
}

void throw_torch_error(bool oom, const std::string& message) {
  const c10::SourceLocation here{__func__, __FILE__, uint32_t(__LINE__)};
  if (oom) throw c10::OutOfMemoryError(here, message);
  throw c10::Error(here, message);
}

// The first line of LibTorch's message (what() goes on with "Exception raised from ..." and a
// backtrace).
std::string first_line(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

void rethrow_torch_error(std::exception_ptr failure, const std::string& who) {
  try {
    std::rethrow_exception(failure);
  } catch (const c10::OutOfMemoryError& e) {
    throw ModelError(who + "out of device memory: " + first_line(e.what_without_backtrace()),
                     kExitFailure);
  } catch (const c10::Error& e) {
    throw ModelError(who + first_line(e.what_without_backtrace()), kExitFailure);
  } catch (...) {
  }
}

TorchDevices make_table() {
  TorchDevices t;
  t.cuda_device_count = count_cuda_devices;
  t.make_context = make_device_context;
  t.cuda_memory = cuda_memory;
  t.cap_cuda_allocator = cap_cuda_allocator;
  t.inprocess_group = inprocess_group;
  t.nccl_group = nccl_group;
  t.throw_torch_error = throw_torch_error;
  t.rethrow_torch_error = rethrow_torch_error;
  t.make_frame_path = make_frame_path_device;
  t.pin_cpu_rank = pin_cpu_rank;
  return t;
}

}  // namespace
}  // namespace wm::parallel

// Called once per process by torch_devices() (parallel/torch_side.cpp).
extern "C" const wm::parallel::TorchDevices* wm_torch_devices() {
  static const wm::parallel::TorchDevices table = wm::parallel::make_table();
  return &table;
}
