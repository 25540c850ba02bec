#include "scheduler/progress.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace wm::sched {

Progress::Progress(ProgressStyle style, std::FILE* out) : style_(style), out_(out) {
  if (style_ == ProgressStyle::kAuto) {
    style_ = isatty(fileno(out_)) ? ProgressStyle::kBar : ProgressStyle::kPlain;
  }
}

Progress::Progress(Progress& parent)
    : style_(ProgressStyle::kNone), out_(parent.out_), parent_(&parent) {}

void Progress::grow(int64_t frames_total) {
  std::lock_guard<std::mutex> lock(mutex_);
  total_ += frames_total;
  draw(false);
}

void Progress::begin(const std::string& label, int64_t frames_total) {
  if (parent_) parent_->grow(frames_total);
  std::lock_guard<std::mutex> lock(mutex_);
  label_ = label;
  total_ = frames_total;
  done_ = 0;
  last_percent_ = -1;
  start_ = last_draw_ = Clock::now();
  draw(true);
}

void Progress::add(int64_t frames) {
  if (parent_) parent_->add(frames);
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += frames;
  draw(false);
}

void Progress::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (total_ < done_) total_ = done_;
  draw(true);
  if (style_ == ProgressStyle::kBar) std::fputc('\n', out_);
  std::fflush(out_);
}

int64_t Progress::frames() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

int64_t Progress::frames_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return total_;
}

double Progress::seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void Progress::draw(bool force) {
  if (style_ == ProgressStyle::kNone) return;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double fps = elapsed > 0 ? done_ / elapsed : 0;
  const int percent = total_ > 0 ? int(std::min<int64_t>(100, done_ * 100 / total_)) : 0;
  if (style_ == ProgressStyle::kFarm) {
    // One line per new percentage; end() must not repeat "Progress: 100%".
    if (total_ > 0 && percent != last_percent_) {
      std::fprintf(out_, "Progress: %d%%\n", percent);
      std::fflush(out_);
      last_percent_ = percent;
    }
    return;
  }
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (style_ == ProgressStyle::kPlain) {
    // A line every 5 s is enough for a log file.
    if (!force && since < 5.0) return;
    last_draw_ = now;
    std::fprintf(out_, "%s: %lld/%lld frames, %.1f fps\n", label_.c_str(), (long long)done_,
                 (long long)total_, fps);
    std::fflush(out_);
    return;
  }
  if (!force && since < 0.2) return;
  last_draw_ = now;
  const int width = 30;
  const int filled = total_ > 0 ? int(width * std::min(1.0, double(done_) / total_)) : 0;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::string eta = "--:--";
  if (fps > 0 && total_ > done_) {
    const int secs = int(std::lround((total_ - done_) / fps));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%d:%02d", secs / 60, secs % 60);
    eta = buf;
  }
  std::fprintf(out_, "\r[%s] %3d%% %lld/%lld frames %.1f fps ETA %s %s\x1b[K", bar.c_str(), percent,
               (long long)done_, (long long)total_, fps, eta.c_str(), label_.c_str());
  std::fflush(out_);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace wm::sched
