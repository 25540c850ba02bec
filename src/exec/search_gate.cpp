#include "src/exec/search_gate.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

namespace wm::exec {

// A writer-preferring shared gate: `alone` passes wait for no pass to stand; shared passes wait
// while one stands alone or waits to.
struct SearchGate {
  std::mutex mutex;
  std::condition_variable changed;
  int shared = 0;
  int alone_waiting = 0;
  int shared_waiting = 0;
  bool alone = false;
};

namespace {

std::atomic<int64_t> alone_passes{0};

// The process's gates, made once per device (a lookup under a process-wide mutex: once per
// thread and device, see search_gate()).
SearchGate& gate_of(int device) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<SearchGate>> gates;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& gate = gates[device];
  if (!gate) gate = std::make_unique<SearchGate>();
  return *gate;
}

}  // namespace

SearchPass search_gate(int device, uint64_t shape) {
  thread_local std::set<std::pair<int, uint64_t>> passed;
  // Every convolution passes here: the gate is looked up once per thread, not under the
  // process-wide mutex on every call.
  thread_local std::map<int, SearchGate*> gates;
  SearchGate*& known = gates[device];
  if (known == nullptr) known = &gate_of(device);
  SearchGate& gate = *known;
  SearchPass pass;
  pass.alone_ = passed.insert({device, shape}).second;
  if (pass.alone_) alone_passes.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(gate.mutex);
  if (pass.alone_) {
    ++gate.alone_waiting;
    gate.changed.wait(lock, [&] { return !gate.alone && gate.shared == 0; });
    --gate.alone_waiting;
    gate.alone = true;
  } else {
    ++gate.shared_waiting;
    gate.changed.wait(lock, [&] { return !gate.alone && gate.alone_waiting == 0; });
    --gate.shared_waiting;
    ++gate.shared;
  }
  pass.gate_ = &gate;
  return pass;
}

int64_t search_gate_alone_passes() { return alone_passes.load(std::memory_order_relaxed); }

int search_gate_waiting(int device) {
  SearchGate& gate = gate_of(device);
  const std::lock_guard<std::mutex> lock(gate.mutex);
  return gate.alone_waiting + gate.shared_waiting;
}

SearchPass::SearchPass(SearchPass&& other) noexcept
    : gate_(std::exchange(other.gate_, nullptr)), alone_(other.alone_) {}

SearchPass& SearchPass::operator=(SearchPass&& other) noexcept {
  if (this != &other) {
    SearchPass old(std::move(*this));
    gate_ = std::exchange(other.gate_, nullptr);
    alone_ = other.alone_;
  }
  return *this;
}

SearchPass::~SearchPass() {
  if (gate_ == nullptr) return;
  {
    const std::lock_guard<std::mutex> lock(gate_->mutex);
    if (alone_) {
      gate_->alone = false;
    } else {
      --gate_->shared;
    }
  }
  gate_->changed.notify_all();
}

}  // namespace wm::exec
