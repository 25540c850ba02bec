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
  ended_ = true;
  draw(true);
  ended_ = false;
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

namespace {

// "1:05" (minutes:seconds), "1:02:05" past an hour.
std::string clock_text(double seconds) {
  const long s = std::max(0L, std::lround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

void Progress::draw(bool force) {
  if (style_ == ProgressStyle::kNone) return;
  // A label without frames (a batch's line, drawn before its inputs start) says nothing yet.
  if (total_ == 0 && done_ == 0 && !ended_) return;
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
    // Without a frame count (a stream on standard input): the frames so far.
    const std::string frames =
        (total_ > 0 && !ended_ ? std::to_string(done_) + "/" + std::to_string(total_)
                               : std::to_string(done_)) +
        (done_ == 1 && (ended_ || total_ <= 0) ? " frame" : " frames");
    const std::string tail = ended_ ? ", " + clock_text(elapsed) : std::string();
    std::fprintf(out_, "%s: %s, %.1f fps%s\n", label_.c_str(), frames.c_str(), fps, tail.c_str());
    std::fflush(out_);
    return;
  }
  if (!force && since < 0.2) return;
  last_draw_ = now;
  if (total_ <= 0) {
    // Without a frame count (a stream on standard input): frames, fps and the time so far.
    std::fprintf(out_, "\r%lld frames %.1f fps %s %s\x1b[K", (long long)done_, fps,
                 clock_text(elapsed).c_str(), label_.c_str());
    std::fflush(out_);
    return;
  }
  const int width = 30;
  const int filled = int(width * std::min(1.0, double(done_) / total_));
  std::string bar(filled, '#');
  bar.resize(width, '.');
  // The last line says how long it took; the others how long is left.
  std::string when = "in " + clock_text(elapsed);
  if (!ended_) {
    when = fps > 0 && total_ > done_ ? "ETA " + clock_text((total_ - done_) / fps) : "ETA --:--";
  }
  std::fprintf(out_, "\r[%s] %3d%% %lld/%lld frames %.1f fps %s %s\x1b[K", bar.c_str(), percent,
               (long long)done_, (long long)total_, fps, when.c_str(), label_.c_str());
  std::fflush(out_);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace wm::sched
