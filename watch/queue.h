// The watch queue: one SQLite file per WATCH.yaml that records every file the daemon took, with
// its fingerprint (path, size, mtime, settings hash of its watch entry) and its state:
//
//   queued ──claim──► running ──► done
//     ▲                  │ └────► failed   (bad input 65/66, or max_attempts failures)
//     └── retry/interrupt┘          │      (retry: after a back-off, next_attempt_at)
//     ▲                             │
//     └───── requeue_failed ────────┘      (a retry asked for on the status page)
//
// Paused (set_paused): claim() takes nothing, so a running item finishes and no new one starts.
// The flag is kept in the queue file: a restarted daemon stays paused.
//
// Exactly once: a fingerprint is recorded once (a unique index); a file replaced by a new
// version has a new fingerprint and is a new item, the same version is never queued twice.
// A daemon killed at any point leaves items `running`: recover() puts them back in the queue
// (counting `interrupted`), and the worker (watch/worker.h) finds what the killed run finished.
//
// Durability: every change is one short transaction with synchronous=FULL. WAL on local file
// systems (so `wmbatch status` reads while the daemon writes); the rollback journal
// (journal_mode=DELETE) on network file systems, which do not share WAL's memory map between
// hosts — the farm journal's reason (scheduler/journal.h). busy_timeout covers other processes.
//
// Thread-safety: a Queue may be used from any thread (one connection; each call holds a mutex, so
// a transaction and sqlite3_changes() see only their own statements). Errors: OutputError
// naming the queue file.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace wm::watch {

enum class ItemState { kQueued, kRunning, kDone, kFailed };
const char* to_string(ItemState s);

struct Item {
  int64_t id = 0;  // arrival order
  std::string input;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  std::string settings;  // the watch entry's settings hash
  std::string folder;    // the watch entry's folder
  ItemState state = ItemState::kQueued;
  int attempts = 0;     // runs of the job started
  int failures = 0;     // of them failed (back-off and max_attempts count these)
  int interrupted = 0;  // found running after a kill, or stopped by SIGTERM/SIGINT
  int exit_code = 0;
  std::string last_error;
  std::string output;       // final output path, once known
  bool committing = false;  // the output's last rename was under way
  bool disposed = false;    // the source was kept/moved/deleted as configured (done or failed)
  std::string source_now;   // where the source is after that ("" deleted)
  std::string devices;      // where its last attempt ran ("cpu", "cuda:0,2"); "" not yet
  int64_t frames = 0;
  int64_t frames_total = 0;  // while running, when known
  double seconds = 0;        // of the run that finished it
  // Unix seconds; 0 when not yet.
  double queued_at = 0, started_at = 0, finished_at = 0, next_attempt_at = 0;
};

// A chunk of a running or finished item (resume within a file, watch/worker.h): how often its
// work started, and whether (and after how many starts) it was finished. starts_at_done ==
// starts means no work on it started after it was finished.
struct ChunkRow {
  int64_t first_frame = 0;
  int64_t last_frame = 0;  // -1: to the end of the input
  int starts = 0;
  bool done = false;
  int starts_at_done = 0;
  int64_t frames = 0;
};

struct Totals {
  int64_t done = 0, failed = 0, frames = 0;
  double seconds = 0;
};

class Queue {
 public:
  explicit Queue(const std::string& path);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  const std::string& path() const { return path_; }
  bool wal() const { return wal_; }

  // Records a file; false when this fingerprint is already known (any state).
  bool enqueue(const std::string& input, int64_t size, int64_t mtime_ns,
               const std::string& settings, const std::string& folder);
  bool known(const std::string& input, int64_t size, int64_t mtime_ns, const std::string& settings);

  // Running items back to queued (interrupted + 1): the start of a daemon. Returns how many.
  int recover();
  // The oldest queued item due at `now` (unix seconds), marked running; nullopt when none or
  // when the queue is paused. `held` (when given) is set to the input of the item that would
  // have been taken had the queue not been paused, else cleared. Once set_paused(true) returned,
  // no claim takes an item (both are transactions on the same file).
  std::optional<Item> claim(double now, std::string* held = nullptr);
  void set_paused(bool paused);
  bool paused();

  // attempts + 1; `devices`: where this attempt runs ("cpu", "cuda:0,2", ...).
  void begin_attempt(int64_t id, const std::string& output, const std::string& devices = "");
  void set_progress(int64_t id, int64_t frames, int64_t frames_total);
  // Chunks of an item (ChunkRow): its work on a chunk started; a chunk is finished (recorded the
  // first time only; a chunk found finished by a later run changes nothing).
  void chunk_started(int64_t id, int64_t first_frame, int64_t last_frame);
  void chunk_done(int64_t id, int64_t first_frame, int64_t last_frame, int64_t frames);
  std::vector<ChunkRow> chunks(int64_t id);
  void set_committing(int64_t id);
  void set_done(int64_t id, int64_t frames, double seconds);
  // A failure that may pass: queued again, due at `next_attempt_at`.
  void set_retry(int64_t id, int exit_code, const std::string& error, double next_attempt_at);
  void set_failed(int64_t id, int exit_code, const std::string& error);
  // Stopped on request (SIGTERM/SIGINT): queued again at once, interrupted + 1, no failure.
  void set_interrupted(int64_t id);
  void set_disposed(int64_t id, const std::string& source_now);
  // A failed item whose source was put back where it was taken from (watch/worker.h
  // restore_failed_source), queued again, due at once: attempts, failures, the last error and
  // exit code are kept. False (nothing changed) when the item is not failed with its source
  // disposed of: a failure still being recorded is not taken from under its worker.
  bool requeue_failed(int64_t id);
  void remove(int64_t id);

  std::optional<Item> item(int64_t id);
  // Items in `state` by id (oldest first, or newest first), at most `limit`.
  std::vector<Item> items(ItemState state, int limit, bool newest_first = false);
  // Done and failed items, latest finished first.
  std::vector<Item> history(int limit);
  // Done or failed items whose source was not yet kept/moved/deleted.
  std::vector<Item> undisposed();
  std::map<ItemState, int64_t> counts();
  Totals totals();

 private:
  void exec(const char* sql);
  void record_failure(int64_t id, int exit_code, const std::string& error, ItemState state,
                      double at);
  std::string path_;
  sqlite3* db_ = nullptr;
  bool wal_ = false;
  std::mutex mutex_;
};

// Unix time in seconds (wall clock, for the queue's timestamps).
double unix_now();
// A queue timestamp as UTC text in strftime's `format`; "" for 0 (not yet).
std::string utc_text(double unix_seconds, const char* format = "%Y-%m-%d %H:%M:%S");

}  // namespace wm::watch
