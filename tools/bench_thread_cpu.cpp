#include "tools/bench_thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace wm::bench {

struct ThreadCpuSampler::Tasks {
  struct Seen {
    std::string name;
    long first = -1;  // ticks at the first sample (threads already there at the start)
    long last = 0;
  };
  std::map<long, Seen> seen;  // by thread id

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
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::atol(field.c_str());
        if (i == 15) stime = std::atol(field.c_str());
      }
      Seen& s = seen[std::atol(e->d_name)];
      s.name = line.substr(open + 1, close - open - 1);
      if (first && s.first < 0) s.first = utime + stime;
      if (s.first < 0) s.first = 0;  // born after the start
      s.last = utime + stime;
    }
    closedir(dir);
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
  for (const auto& [tid, s] : tasks_->seen) by_name[s.name] += double(s.last - s.first) * tick;
  return by_name;
}

}  // namespace wm::bench
