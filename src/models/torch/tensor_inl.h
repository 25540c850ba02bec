#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "src/base/error.h"

namespace wm::models {

template <typename Fn>
auto guarded(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::OutOfMemoryError& e) {
    // Not bad data: a retry with more free memory may pass (exit 1).
    throw ModelError(std::string(what) + ": out of device memory: " + e.what_without_backtrace(),
                     kExitFailure);
  } catch (const c10::Error& e) {
    throw ModelError(std::string(what) + ": " + e.what_without_backtrace());
  }
}

}  // namespace wm::models
