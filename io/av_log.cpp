#include "io/av_log.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "src/base/log.h"

extern "C" {
#include <libavutil/log.h>
}

namespace wm::io {
namespace {

// The innermost AvLogCapture of this thread: where its first problem goes; null when none.
thread_local std::string* capture_target = nullptr;

spdlog::level::level_enum map_level(int level) {
  if (level <= AV_LOG_ERROR) return spdlog::level::err;
  if (level <= AV_LOG_WARNING) return spdlog::level::warn;
  if (level <= AV_LOG_INFO) return spdlog::level::debug;
  return spdlog::level::trace;
}

void callback(void* avcl, int level, const char* format, va_list args) {
  if (level > av_log_get_level()) return;
  static const auto logger = wm::log::get("libav");
  auto mapped = map_level(level);
  if (capture_target) {
    if (level <= AV_LOG_WARNING && capture_target->empty()) {
      char text[512];
      va_list copy;
      va_copy(copy, args);
      std::vsnprintf(text, sizeof(text), format, copy);
      va_end(copy);
      std::string problem = text;
      while (!problem.empty() &&
             (problem.back() == '\n' || problem.back() == '\r' || problem.back() == '.')) {
        problem.pop_back();
      }
      *capture_target = problem;
    }
    mapped = std::min(mapped, spdlog::level::debug);
  }
  if (!logger->should_log(mapped)) return;
  // libav emits partial lines (no trailing newline) and tells us with print_prefix whether the
  // next piece starts a new line; keep a per-thread buffer until the newline arrives.
  thread_local std::string pending;
  thread_local int print_prefix = 1;
  char line[1024];
  av_log_format_line2(avcl, level, format, args, line, sizeof(line), &print_prefix);
  pending += line;
  if (pending.empty() || pending.back() != '\n') return;
  while (!pending.empty() && (pending.back() == '\n' || pending.back() == '\r')) pending.pop_back();
  if (!pending.empty()) logger->log(mapped, "{}", pending);
  pending.clear();
}

}  // namespace

AvLogCapture::AvLogCapture() : outer_(capture_target) { capture_target = &first_problem_; }
AvLogCapture::~AvLogCapture() { capture_target = outer_; }

void install_av_log() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(callback); });
}

}  // namespace wm::io
