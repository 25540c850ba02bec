// Helpers shared by the farm and Slurm end-to-end tests (test_farm*.cpp, test_slurm*.cpp):
// background processes with their output in a file, libav packet dumps for exact comparisons.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/av_handles.h"
#include "tests/support/run.h"

namespace wm::test {

// `wmbatch run JOB` without --chunk takes its chunk from these when set (as when CI itself runs
// as a Slurm array task); the farm tests mean every chunk. Cleared once, before any test runs.
inline const bool kFarmEnvironmentCleared = [] {
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  ::unsetenv("JOB_COMPLETION_INDEX");
  return true;
}();

// build/wmbatch ARGS (no --progress default: farm commands choose their own).
inline CommandResult wm(std::vector<std::string> args) {
  args.insert(args.begin(), wmbatch_path());
  return run_command(args);
}

// How often `needle` occurs in `text` (overlaps counted).
inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A child process whose stdout+stderr go to `log`. Killed (SIGKILL) and reaped on destruction.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Exit status (128 + signal when killed); blocks.
  int wait() {
    if (done_) return status_;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    done_ = true;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
  }
  // True once exited (non-blocking).
  bool exited() {
    if (done_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return done_;
  }
  std::string output() const { return read_text(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = -1;
};

// Polls `ready` every 20 ms for up to `seconds`; true when it held.
template <typename F>
bool wait_until(F&& ready, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

// Byte equality of two files, reported as sizes and the first differing offset (not the bytes).
inline ::testing::AssertionResult same_bytes(const std::string& a, const std::string& b) {
  const std::string x = read_text(a), y = read_text(b);
  if (x == y && !x.empty()) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < x.size() && at < y.size() && x[at] == y[at]) ++at;
  return ::testing::AssertionFailure() << a << " (" << x.size() << " bytes) and " << b << " ("
                                       << y.size() << " bytes) differ from byte " << at;
}

struct PacketDump {
  int64_t pts = 0, dts = 0, duration = 0;
  std::string data;
  bool key = false;
  bool operator==(const PacketDump& o) const {
    return pts == o.pts && dts == o.dts && duration == o.duration && data == o.data;
  }
};

// Every packet of the first stream of `type` (timestamps in that stream's time base).
inline std::vector<PacketDump> dump_packets(const std::string& path, AVMediaType type,
                                            AVRational* time_base = nullptr) {
  AVFormatContext* raw = nullptr;
  if (avformat_open_input(&raw, path.c_str(), nullptr, nullptr) < 0) {
    throw std::runtime_error("cannot open " + path);
  }
  io::FormatInputPtr format(raw);
  if (avformat_find_stream_info(format.get(), nullptr) < 0) throw std::runtime_error(path);
  int index = -1;
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    if (index < 0 && format->streams[i]->codecpar->codec_type == type) index = int(i);
  }
  std::vector<PacketDump> out;
  if (index < 0) return out;
  if (time_base) *time_base = format->streams[index]->time_base;
  io::PacketPtr pkt = io::make_packet();
  while (av_read_frame(format.get(), pkt.get()) >= 0) {
    if (pkt->stream_index == index) {
      out.push_back({pkt->pts, pkt->dts, pkt->duration,
                     std::string(reinterpret_cast<const char*>(pkt->data), size_t(pkt->size)),
                     (pkt->flags & AV_PKT_FLAG_KEY) != 0});
    }
    av_packet_unref(pkt.get());
  }
  return out;
}

}  // namespace wm::test
