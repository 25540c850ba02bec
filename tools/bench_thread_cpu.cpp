#include "tools/bench_thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "src/base/thread_name.h"

namespace wm::bench {

struct ThreadCpuSampler::Tasks {
  struct Seen {
    long last = -1;  // ticks at the last sample (-1: not seen yet)
  };
  std::map<std::pair<long, unsigned long long>, Seen> seen;  // by thread id and start time
  // Ticks since the start by thread name, each sample's new ticks under the name the thread had
  // then (a thread that takes a role's name for a while, as a writer opening its encoder does,
  // keeps its earlier ticks under its own).
  std::map<std::string, long> by_name;
  // Per sample: seconds since the start, and the ticks so far of the encoders' threads and of
  // the others.
  struct Point {
    double at = 0;
    long encode = 0, other = 0;
  };
  std::vector<Point> points;
  long encode = 0, other = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void sample(bool first) {
    DIR* dir = opendir("/proc/self/task");
    if (!dir) return;
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/stat");
      std::string line;
      if (!std::getline(in, line)) continue;  // gone meanwhile
      // pid (comm) state ppid ... : comm may hold spaces and parentheses; it ends at the last ')'.
      const size_t open = line.find('('), close = line.rfind(')');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      long utime = 0, stime = 0;
      unsigned long long born = 0;
      for (int i = 3; i <= 22 && rest >> field; ++i) {
        if (i == 14) utime = std::atol(field.c_str());
        if (i == 15) stime = std::atol(field.c_str());
        if (i == 22) born = std::strtoull(field.c_str(), nullptr, 10);
      }
      // A thread id the kernel gave again to a newer thread is another thread.
      Seen& s = seen[{std::atol(e->d_name), born}];
      const long now = utime + stime;
      // Threads there at the first sample count from it; threads born later from 0.
      const long added = s.last < 0 ? (first ? 0 : now) : now - s.last;
      s.last = now;
      const std::string name = line.substr(open + 1, close - open - 1);
      by_name[name] += added;
      (name == kEncodeThreads ? encode : other) += added;
    }
    closedir(dir);
    Point p;
    p.at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    p.encode = encode;
    p.other = other;
    points.push_back(p);
  }
};

ThreadCpuSampler::ThreadCpuSampler() : tasks_(std::make_unique<Tasks>()) {
  tasks_->sample(/*first=*/true);
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      tasks_->sample(false);
    }
  });
}

ThreadCpuSampler::~ThreadCpuSampler() {
  if (thread_.joinable()) stop();
}

std::map<std::string, double> ThreadCpuSampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  tasks_->sample(false);
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  std::map<std::string, double> by_name;
  for (const auto& [name, ticks] : tasks_->by_name) by_name[name] = double(ticks) * tick;
  return by_name;
}

ThreadCpuSampler::Busy ThreadCpuSampler::timeline(double bucket) const {
  Busy busy;
  const std::vector<Tasks::Point>& points = tasks_->points;
  if (points.size() < 2 || bucket <= 0) return busy;
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  // The ticks so far at time t, linear between the samples around it.
  auto at = [&](double t, long Tasks::Point::*field) {
    size_t i = 1;
    while (i + 1 < points.size() && points[i].at < t) ++i;
    const Tasks::Point &a = points[i - 1], &b = points[i];
    const double span = std::max(b.at - a.at, 1e-9);
    const double f = std::clamp((t - a.at) / span, 0.0, 1.0);
    return double(a.*field) + f * double(b.*field - a.*field);
  };
  const double end = points.back().at;
  for (double t = 0; t < end; t += bucket) {
    const double to = std::min(t + bucket, end), width = std::max(to - t, 1e-9);
    busy.encode.push_back((at(to, &Tasks::Point::encode) - at(t, &Tasks::Point::encode)) * tick /
                          width);
    busy.other.push_back((at(to, &Tasks::Point::other) - at(t, &Tasks::Point::other)) * tick /
                         width);
  }
  return busy;
}

}  // namespace wm::bench
