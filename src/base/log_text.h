// String-only logging for code that must not include spdlog or fmt: the model translation units
// (LibTorch 2.x bundles its own fmt, which clashes with spdlog's) and CUDA code. Lines go to the
// project's logger of that name (src/base/log.h), so they share its sink, format and level.
// Thread-safe.
#pragma once

#include <string>

namespace wm::log {

enum class Level { kDebug, kInfo, kWarn, kError };

// Writes `message` through the logger `logger` (made on first use, like log::get).
void write(const std::string& logger, Level level, const std::string& message);

inline void debug(const std::string& logger, const std::string& message) {
  write(logger, Level::kDebug, message);
}
inline void info(const std::string& logger, const std::string& message) {
  write(logger, Level::kInfo, message);
}
inline void warn(const std::string& logger, const std::string& message) {
  write(logger, Level::kWarn, message);
}
inline void error(const std::string& logger, const std::string& message) {
  write(logger, Level::kError, message);
}

}  // namespace wm::log
