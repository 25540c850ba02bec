#include "tests/support/log_capture.h"

#include <algorithm>

#include "src/base/log.h"

namespace wm::test {

LogCapture::LogCapture(const std::vector<std::string>& loggers)
    : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
  sink_->set_pattern("%n %l: %v");
  for (const auto& name : loggers) {
    loggers_.push_back(log::get(name));
    loggers_.back()->sinks().push_back(sink_);
  }
}

LogCapture::~LogCapture() {
  for (const auto& logger : loggers_) {
    auto& sinks = logger->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
}

std::vector<std::string> LogCapture::lines(const std::string& level) const {
  std::vector<std::string> found;
  std::istringstream in(text());
  for (std::string line; std::getline(in, line);) {
    if (line.find(" " + level + ": ") != std::string::npos) found.push_back(line);
  }
  return found;
}

std::string LogCapture::text() const {
  sink_->flush();
  return text_.str();
}

}  // namespace wm::test
