// Thread names by role, so that `top -H`, debuggers and wmbench's per-role CPU time can say where a
// job's CPU goes. A thread starts with its creator's name on Linux, so naming the thread that
// opens a decoder or an encoder for that moment names the worker threads the codec starts.
#pragma once

#include <pthread.h>

#include <cstring>

namespace wm {

// Names the calling thread (Linux keeps 15 characters).
inline void name_this_thread(const char* name) {
  char cut[16] = {};
  std::strncpy(cut, name, sizeof(cut) - 1);
  pthread_setname_np(pthread_self(), cut);
}

// Names the calling thread for the scope, then gives it back its name.
class ScopedThreadName {
 public:
  explicit ScopedThreadName(const char* name) {
    had_ = pthread_getname_np(pthread_self(), previous_, sizeof(previous_)) == 0;
    name_this_thread(name);
  }
  ~ScopedThreadName() {
    if (had_) pthread_setname_np(pthread_self(), previous_);
  }
  ScopedThreadName(const ScopedThreadName&) = delete;
  ScopedThreadName& operator=(const ScopedThreadName&) = delete;

 private:
  char previous_[16] = {};
  bool had_ = false;
};

// Role names (wmbench upscale --devices sums CPU time by them).
constexpr const char* kDecodeThreads = "wm-decode";  // a decoder's thread and the ones it starts
constexpr const char* kEncodeThreads = "wm-encode";  // an encoder's threads
constexpr const char* kLaneThreads = "wm-lane";      // an input lane of a batch
constexpr const char* kReadThreads = "wm-read";      // the device frame path's reading thread

}  // namespace wm
