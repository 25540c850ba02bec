// Logging: one spdlog logger per stage, named like ffmpeg's ("dec0:h264", "enc0:libx264"),
// all writing to stderr through one shared sink so lines never interleave mid-line.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace wm::log {

// The shared stderr sink; created on first use. Thread-safe.
std::shared_ptr<spdlog::logger> get(const std::string& name);

// Sets the level for all loggers ("error", "warn", "info", "debug", "trace").
void set_level(const std::string& level);

}  // namespace wm::log
