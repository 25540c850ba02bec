// A worker runs claimed queue items, one at a time, through the batch runner's TaskRunner
// (scheduler/tasks.h: models loaded once per worker and watch entry, reused for every file).
//
// One item, so that a kill at any point leaves exactly one complete output or none:
//   1. the source must still be the version that settled (else the item is dropped: its new
//      version is an item of its own);
//   2. the job writes to a hidden name beside the output, ".wmwatch-<id>-<name>" (through the
//      runner's own "<name>.<pid>.partial" → verify → fsync → rename), so a complete file there is
//      this item's finished work: a rerun after a kill takes it instead of redoing it. With
//      chunk_frames (WATCH.yaml, default 240) the file runs as chunks of frames, each encoded
//      to a segment in the work folder ".wmwatch-<id>-<name>.wmfarm/" and recorded in its
//      journal, then assembled by stream copy into the hidden name (scheduler/farm_input.h
//      run_input_chunks): a rerun after a kill or SIGTERM keeps the finished chunks and redoes
//      only the others. The queue counts each chunk's starts (Queue::chunks). The work folder is
//      removed once the hidden file is complete, and when the item is dropped or fails for good;
//   3. commit: the queue records `committing`, the file is renamed to the output (not over an
//      existing one unless on_exists: overwrite), the folder fsynced, the item marked done;
//   4. the source is kept, moved to the done folder or deleted (recorded as `disposed`).
// Failures: exit codes 65/66 (bad or missing input) fail at once; others are retried after
// backoff_seconds × 2^(failures-1) (capped) until retry.max_attempts failures. A failed input
// goes to the failed folder (or stays) with "<name>.error.txt" beside it. SIGTERM/SIGINT: the
// runner stops at its next slice boundary (RunOptions::cancel) and the item is queued again; the
// next run resumes it from its finished chunks.
//
// Threading: a Worker is used by one thread; live() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "scheduler/farm_input.h"
#include "scheduler/progress.h"
#include "scheduler/tasks.h"
#include "watch/queue.h"
#include "watch/watch_spec.h"

namespace wm::watch {

// The very file a worker took (device and inode), beside the size and mtime the queue records.
struct SourceFile {
  dev_t dev = 0;
  ino_t ino = 0;
};

// What a worker is doing now, for the status page.
struct LiveItem {
  int worker = 0;
  int64_t id = 0;
  std::string input;
  std::string output;
  int64_t frames = 0;
  int64_t frames_total = 0;    // 0 when unknown
  double seconds = 0;          // since the item started
  int64_t frames_resumed = 0;  // of `frames`, finished by an earlier run (not counted for fps)
  int64_t chunks_done = 0;     // chunks finished (by this run or an earlier one)
  std::string devices;         // where it runs: "cpu", "cuda:0", "cuda:0,2", "auto"
};

class Worker {
 public:
  Worker(int index, Queue& queue, const std::atomic<bool>& cancel);

  // Processes a claimed item of `entry` (of `spec`). Never throws: every outcome is recorded in
  // the queue and logged.
  void run(const Item& item, const WatchEntry& entry, const WatchSpec& spec);
  // Forgets the loaded models (after a reload of WATCH.yaml).
  void drop_runners() { runners_.clear(); }
  std::optional<LiveItem> live() const;

 private:
  sched::ChunkRunners& runners_for(const WatchEntry& entry, const JobSpec& job);
  void process(const Item& item, const WatchEntry& entry, const WatchSpec& spec);

  int index_;
  Queue& queue_;
  std::optional<SourceFile> taken_;  // the source of the item being run, as it was taken
  const std::atomic<bool>& cancel_;
  std::map<std::string, std::unique_ptr<sched::ChunkRunners>> runners_;  // by settings + devices
  sched::Progress progress_{sched::ProgressStyle::kNone};
  mutable std::mutex live_mutex_;
  std::optional<LiveItem> live_;
  std::chrono::steady_clock::time_point live_start_;
  int64_t live_base_ = 0;      // frames before the running chunk
  int64_t live_total_ = 0;     // frames of the input, when known from its plan
  bool live_counting_ = true;  // progress_ counts the running chunk's frames
};

// Puts the source of a finished item where its entry says (keep, move, delete) and records it.
// Used by workers and, at start, for items whose disposal a kill interrupted. A source that is
// no longer the version processed (another size or mtime, or not the file `seen`: a new version
// moved over it meanwhile) is kept where it is: it is a file of its own. A move to another file
// system copies to a temp name, fsyncs and renames, so a full disk leaves no file at the done
// folder's name and the source in place.
void dispose_done(Queue& queue, const Item& item, const WatchEntry& entry,
                  const SourceFile* seen = nullptr);
// Moves the source of a failed item to the failed folder (when set; not a new version, as
// above) and writes its "<name>.error.txt" (created exclusively, src/base/fs.h); records it.
void dispose_failed(Queue& queue, const Item& item, const WatchEntry& entry,
                    const SourceFile* seen = nullptr);
// Puts the source of a failed item (disposed of: `source_now` says where it is) back where it
// was taken from (`input`), the way dispose_failed moved it (a rename; across file systems a
// copy that never leaves a partial file at `input`), and removes its "<name>.error.txt".
// Returns "" when the file is at `input` now (also when it was never moved, or was moved back
// already); else one line saying why not, nothing moved: the file is no longer where it was
// put, it changed since, or another file took its place at `input`. Throws OutputError when the
// move itself fails (the file then stays where it was).
std::string restore_failed_source(const Item& item);

}  // namespace wm::watch
