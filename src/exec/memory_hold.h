// A share of a memory budget held by one session (exec::DeviceContext::hold_host_memory): while
// it stands, the other sessions of the process see the budget less it. Torch-free: the budget
// behind it is parallel::MemoryPool (parallel/memory_budget.h).
#pragma once

#include <cstdint>

namespace wm::exec {

class MemoryHold {
 public:
  virtual ~MemoryHold() = default;  // releases the share
  virtual int64_t bytes() const = 0;
  // Grows or shrinks the share. Never fails: a budget accounts for memory, it allocates none; the
  // holder sizes its plan from DeviceContext::host_memory_available first.
  virtual void resize(int64_t bytes) = 0;
};

}  // namespace wm::exec
