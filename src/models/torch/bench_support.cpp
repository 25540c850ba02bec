#include "src/models/bench_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#define WMBATCH_WITH_KINETO 1
#endif
#endif

namespace wm::models {

void set_cpu_threads(int n) {
  if (n > 0) at::set_num_threads(n);
}

int cpu_threads() { return at::get_num_threads(); }

void reset_peak_device_memory(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device.index));
    c10::cuda::CUDACachingAllocator::resetAccumulatedStats(
        static_cast<c10::DeviceIndex>(device.index));
  }
#else
  (void)device;
#endif
}

double peak_device_memory_mib(const Device& device) {
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index));
    return double(stats.allocated_bytes[0].peak) / double(1 << 20);  // [0]: aggregate
  }
#else
  (void)device;
#endif
  return -1;
}

AllocatorCounts device_allocator_counts(const Device& device) {
  AllocatorCounts out;
#ifdef WMBATCH_WITH_CUDA
  if (device.kind == Device::Kind::kCuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device.index));
    out.alloc_retries = stats.num_alloc_retries;
    out.segment_allocs = stats.segment[0].allocated;
    out.segments = stats.segment[0].current;
    out.peak_reserved_mib = double(stats.reserved_bytes[0].peak) / double(1 << 20);
  }
#else
  (void)device;
#endif
  return out;
}

GpuActivity measure_gpu_activity(const std::function<void()>& body, const std::string& trace) {
  GpuActivity a;
#ifdef WMBATCH_WITH_KINETO
  namespace impl = torch::profiler::impl;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> activities{impl::ActivityType::CUDA};
  if (!trace.empty()) activities.insert(impl::ActivityType::CPU);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  try {
    body();
  } catch (...) {
    torch::autograd::profiler::disableProfiler();
    throw;
  }
  const auto result = torch::autograd::profiler::disableProfiler();
  if (!trace.empty()) {
    result->save(trace);
    a.trace_written = true;
  }
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const std::string name = e.name();
    if (name.rfind("Memcpy", 0) == 0 || name.rfind("Memset", 0) == 0) continue;
    spans.emplace_back(e.startNs(), e.endNs());
  }
  std::sort(spans.begin(), spans.end());
  a.available = true;
  a.kernels = int64_t(spans.size());
  if (spans.empty()) return a;
  uint64_t end = spans.front().first;
  for (const auto& [s0, s1] : spans) {
    if (s0 > end) {
      const double gap_ms = double(s0 - end) * 1e-6;
      if (s0 - end < 20000) {
        a.short_gap_ms += gap_ms;
        ++a.short_gaps;
      } else {
        a.long_gap_ms += gap_ms;
        ++a.long_gaps;
      }
    }
    if (s1 > end) {
      a.busy_ms += double(s1 - std::max(s0, end)) * 1e-6;
      end = s1;
    }
  }
  a.span_ms = double(end - spans.front().first) * 1e-6;
#else
  (void)trace;
  body();
#endif
  return a;
}

}  // namespace wm::models
