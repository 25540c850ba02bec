#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "src/base/error.h"

namespace wm::models {

template <typename Fn>
auto guarded(const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    throw ModelError(std::string(what) + ": " + e.what_without_backtrace());
  }
}

}  // namespace wm::models
