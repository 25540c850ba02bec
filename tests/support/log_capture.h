// Captures what named loggers print while a LogCapture lives (in addition to stderr), for tests
// that check warnings: how many, and what they say.
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace wm::test {

class LogCapture {
 public:
  // `loggers`: wm::log names such as "libav" or "dec:h264" (created when not there yet).
  explicit LogCapture(const std::vector<std::string>& loggers);
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The captured lines at `level` ("warning", "error"), as "LOGGER LEVEL: TEXT".
  std::vector<std::string> lines(const std::string& level) const;
  std::string text() const;

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::vector<std::shared_ptr<spdlog::logger>> loggers_;
};

}  // namespace wm::test
