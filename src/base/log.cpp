#include "src/base/log.h"

#include "src/base/log_text.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace wm::log {
namespace {
std::mutex g_mutex;
spdlog::level::level_enum g_level = spdlog::level::info;

spdlog::sink_ptr shared_sink() {
  static spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  return sink;
}
}  // namespace

std::shared_ptr<spdlog::logger> get(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(name, shared_sink());
  logger->set_pattern("[%n] %^%l%$: %v");
  logger->set_level(g_level);
  spdlog::register_logger(logger);
  return logger;
}

void set_level(const std::string& level) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_level = spdlog::level::from_str(level);
  spdlog::set_level(g_level);
}

void write(const std::string& logger, Level level, const std::string& message) {
  const std::shared_ptr<spdlog::logger> l = get(logger);
  switch (level) {
    case Level::kDebug:
      l->debug("{}", message);
      break;
    case Level::kInfo:
      l->info("{}", message);
      break;
    case Level::kWarn:
      l->warn("{}", message);
      break;
    case Level::kError:
      l->error("{}", message);
      break;
  }
}

}  // namespace wm::log
