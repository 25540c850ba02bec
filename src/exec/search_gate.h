// cuDNN's algorithm search holds its device alone.
//
// In benchmark mode cuDNN times candidate plans on the device the first time a shape runs, and
// LibTorch keeps what it found per thread (our fused convolutions keep their plans per thread
// too: cuDNN handles are per thread). Threads that share a device — the ranks of a split, input
// lanes — each search every shape again, and a search timed while another thread's kernels run
// beside it reads noise: two ranks sharing an H200 at 1080p kept a plan three times slower than
// one device's for one shape in one run of four (34 ms a call against 12), and the same command
// read 0.84–0.96× of one rank from run to run (docs/gpu.md, stop 48).
//
// So every convolution that may search passes a gate of its device: a shape the calling thread
// has not run before passes it alone (the device's other threads wait at their next
// convolution; cuDNN's search itself waits for the work already queued), every later call of
// the shape shares it with the others. Waiting threads that want to search go before new shared
// passes, so a search is not starved by threads that keep launching. Nothing is held across a
// call's return: a pass covers the launch of one convolution (and, the first time, its search).
//
// Torch-free (the ATen helper is conv_search_pass in search_gate_torch.h).
#pragma once

#include <cstdint>

namespace wm::exec {

struct SearchGate;  // one per device (search_gate.cpp)

class SearchPass {
 public:
  SearchPass() = default;  // passes nothing (no search can happen)
  SearchPass(SearchPass&& other) noexcept;
  SearchPass& operator=(SearchPass&& other) noexcept;
  SearchPass(const SearchPass&) = delete;
  SearchPass& operator=(const SearchPass&) = delete;
  ~SearchPass();

  bool alone() const { return gate_ != nullptr && alone_; }  // this call may search
  bool held() const { return gate_ != nullptr; }

 private:
  friend SearchPass search_gate(int device, uint64_t shape);
  SearchGate* gate_ = nullptr;
  bool alone_ = false;
};

// Waits for the gate of CUDA device `device` for a convolution of `shape` (a hash of what picks
// its plan: sizes, strides, dtype, padding). Alone when this thread has not passed `shape` on
// `device` before (it is then marked passed), shared otherwise.
SearchPass search_gate(int device, uint64_t shape);

// Passes alone so far, on every device: convolution shapes run for the first time on their
// thread, each a cuDNN search when benchmark mode is on (wmbench's `timed_new_shapes`: a
// search in a timed run is time the warm-up did not take).
int64_t search_gate_alone_passes();

// Threads waiting at `device`'s gate now (for tests).
int search_gate_waiting(int device);

// Mixes `value` into a shape hash.
constexpr uint64_t shape_hash(uint64_t seed, uint64_t value) {
  return (seed ^ value) * 0x100000001b3ull + (seed >> 29);
}

}  // namespace wm::exec
