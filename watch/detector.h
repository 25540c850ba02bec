// Detection: which files in the watched folders are ready to be taken. Files become candidates
// through inotify (close-after-write, moved-in, created) and through rescans of every folder (at
// start, and every poll_seconds for network file systems where inotify sees nothing); a candidate
// is ready once its size and mtime have not changed for settle_seconds and no local process
// holds it open for writing (watch/open_files.h). Partial and hidden names are never candidates
// (is_ignored_name), nor files whose fingerprint the queue already knows, nor symbolic links the
// entry does not follow (source_allowed; logged once each). Sub-folders that are symbolic links
// are never descended into.
//
// Threading: one thread (the daemon's loop) uses a Detector.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "watch/watch_spec.h"

namespace wm::watch {

struct ReadyFile {
  std::string path;
  const WatchEntry* entry = nullptr;  // of the spec the Detector was built with
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

class Detector {
 public:
  // True when the queue already holds this version of the file for this entry.
  using KnownFn = std::function<bool(const std::string& path, int64_t size, int64_t mtime_ns,
                                     const WatchEntry& entry)>;

  // Adds inotify watches on every folder of `spec` (and below, for recursive entries). A folder
  // inotify cannot watch is logged and left to the rescans. `spec` must outlive the Detector.
  Detector(const WatchSpec& spec, KnownFn known);
  ~Detector();
  Detector(const Detector&) = delete;
  Detector& operator=(const Detector&) = delete;

  // The inotify descriptor to poll() for input; -1 when inotify is unavailable.
  int fd() const { return fd_; }
  // Reads the pending inotify events (non-blocking).
  void read_events();
  // Walks every watched folder; each file not yet known becomes a candidate.
  void rescan();
  // The candidates that settled, in arrival order, removed from the candidates.
  std::vector<ReadyFile> take_ready();
  size_t candidates() const { return candidates_.size(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Candidate {
    const WatchEntry* entry;
    int64_t size = -1;
    int64_t mtime_ns = -1;
    Clock::time_point stable_since;
    uint64_t seq = 0;  // arrival order
  };
  void add_watch(const std::string& dir, bool recursive_scan);
  void scan_folder(const std::string& dir, bool recursive, std::vector<std::string>& files);
  void consider(const std::string& path);

  const WatchSpec& spec_;
  KnownFn known_;
  int fd_ = -1;
  std::map<int, std::string> watches_;  // inotify watch descriptor → folder
  std::map<std::string, Candidate> candidates_;
  std::set<std::string> refused_;  // symbolic links not taken, logged once
  uint64_t next_seq_ = 0;
};

}  // namespace wm::watch
