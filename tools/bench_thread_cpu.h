// CPU time by thread name over a stretch of a benchmark (wmbench upscale --devices): a thread
// samples /proc/self/task every 50 ms, so threads that come and go (an encoder's, per input) are
// counted up to their last sample. The names are the roles of src/base/thread_name.h; others
// (LibTorch's, CUDA's, the main thread) under their own names; each sample's new ticks count under
// the name the thread had then. It also keeps, per sample, the CPU
// time so far of the encoders' threads and of all the others, so that when the cores were busy
// (a batch's start, its lanes' ends) can be read, not only how much.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace wm::bench {

class ThreadCpuSampler {
 public:
  ThreadCpuSampler();  // starts sampling
  ~ThreadCpuSampler();
  ThreadCpuSampler(const ThreadCpuSampler&) = delete;
  ThreadCpuSampler& operator=(const ThreadCpuSampler&) = delete;
  // Stops sampling; CPU seconds (user + system) per thread name since the start.
  std::map<std::string, double> stop();
  // After stop(): the cores busy on average in each `bucket` seconds from the start, encoders'
  // threads (src/base/thread_name.h kEncodeThreads) and the others, interpolated between samples.
  struct Busy {
    std::vector<double> encode, other;
  };
  Busy timeline(double bucket) const;

 private:
  struct Tasks;
  std::unique_ptr<Tasks> tasks_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace wm::bench
