#include "parallel/torch/cpu_pinning.h"

#include <ATen/Parallel.h>
#include <pthread.h>
#include <sched.h>

#include <vector>

namespace wm::parallel {

namespace {

// The CPUs the process may run on, in order (its affinity when the first rank pins: a rank's
// own mask afterwards would be too narrow).
const std::vector<int>& process_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) out.push_back(c);
      }
    }
    return out;
  }();
  return cpus;
}

}  // namespace

int pin_cpu_rank(int rank, int ranks) {
  const std::vector<int>& cpus = process_cpus();
  const int t = at::get_num_threads();
  cpu_set_t set;
  CPU_ZERO(&set);
  int pinned = 0;
  if (rank < 0) {
    for (int c : cpus) CPU_SET(c, &set);
  } else {
    if (t < 1 || ranks < 1 || int64_t(ranks) * t > int64_t(cpus.size())) return 0;
    for (int i = 0; i < t; ++i) CPU_SET(cpus[size_t(rank * t + i)], &set);
    pinned = t;
  }
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  // Every thread of this thread's team runs one of the t iterations, and pins itself.
  at::parallel_for(0, t, 1, [&](int64_t, int64_t) {
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  });
  return pinned;
}

}  // namespace wm::parallel
