// The LibTorch side of a device worker (device_worker.h): its device context, and the CUDA
// allocator's numbers that memory_budget.h reports. Reached from the torch-free code through
// parallel/torch_side.h; include only from the LibTorch side.
#pragma once

#include <memory>

#include "parallel/torch_side.h"
#include "src/exec/device_context.h"
#include "src/model.h"

namespace wm::parallel {

// The context of a worker on `device`: its output sink and input staging (offload.h, made on
// first use), its memory budget, its side streams. Call on the worker's thread: on a GPU it
// makes the device current and a compute stream of its own the thread's current stream.
std::unique_ptr<exec::DeviceContext> make_device_context(const Device& device);

// CUDA device `device`'s numbers (zeros on builds without CUDA).
CudaMemory cuda_memory(int device);
void cap_cuda_allocator(int device, double fraction);

}  // namespace wm::parallel
