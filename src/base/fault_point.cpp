#include "src/base/fault_point.h"

namespace wm {

namespace detail {
std::atomic<FaultHook> g_fault_hooks[int(FaultPoint::kCount)] = {};
}

void set_fault_hook(FaultPoint point, FaultHook hook) {
  detail::g_fault_hooks[int(point)].store(hook, std::memory_order_release);
}

}  // namespace wm
