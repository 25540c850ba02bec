// Progress: a live bar on a TTY (frames, fps, ETA, current file), plain lines otherwise, or
// farm lines ("Progress: N%", Deadline's convention). Without a frame count (a stream on standard
// input) the bar shows frames, fps and the time so far; an input's last line shows the time it
// took instead of an ETA. A label without frames (a batch's line before its inputs start) draws
// nothing. Thread-safe: the sink stage calls add().
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace wm::sched {

enum class ProgressStyle { kAuto, kBar, kPlain, kFarm, kNone };

class Progress {
 public:
  explicit Progress(ProgressStyle style = ProgressStyle::kAuto, std::FILE* out = stderr);
  // One input of a batch whose inputs run at once (run_job's input lanes): it draws nothing;
  // begin() adds its frames to `parent`'s total and add() counts them there too, so the
  // parent's line shows the whole batch. `parent` outlives it.
  explicit Progress(Progress& parent);
  // Starts a new file; `frames_total` may be 0 when unknown.
  void begin(const std::string& label, int64_t frames_total);
  void add(int64_t frames);
  // Ends the current file (prints a final line on a TTY).
  void end();
  int64_t frames() const;
  int64_t frames_total() const;  // of the current file; 0 when unknown
  double seconds() const;

 private:
  void draw(bool force);
  void grow(int64_t frames_total);
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mutex_;
  ProgressStyle style_;
  std::FILE* out_;
  Progress* parent_ = nullptr;
  std::string label_;
  int64_t total_ = 0;
  int64_t done_ = 0;
  int last_percent_ = -1;
  bool ended_ = false;  // end() is drawing the input's last line
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

// Peak resident set size of this process, MiB.
double peak_rss_mib();
// User + system CPU time of this process so far (all its threads), seconds.
double process_cpu_seconds();

}  // namespace wm::sched
