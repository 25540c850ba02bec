// The farm journal: one SQLite file per output ("<output>.wmfarm/journal.sqlite") that records
// which chunks of that output are finished, the slices of chunks in progress, the cached plan of
// the input, and whether the output was assembled — each with the fingerprint of the input and
// the job settings it was made from, so a rerun skips what is done and redoes what changed.
//
// Durability: rollback journal (journal_mode=DELETE, synchronous=FULL), which, unlike WAL, also
// works on network filesystems that support POSIX locks (NFSv4); every change is one short
// transaction, waiting up to `busy_timeout` for other processes. A chunk is recorded only after
// its segment was fsynced and renamed into place, so the journal never lists a file that is not
// complete (it may miss one that is: that chunk is redone).
//
// Thread-safety: one Journal object per thread; any number of processes may open the same file.
// Errors: OutputError (kExitCantCreat / kExitIoErr) naming the journal file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace wm::sched {

// What a result was made from. Two fingerprints are equal when all fields are.
struct Fingerprint {
  std::string input;      // absolute input path
  int64_t size = -1;      // input size in bytes
  int64_t mtime_ns = -1;  // input modification time
  std::string settings;   // hash of every job setting that changes the output (hex)

  bool operator==(const Fingerprint& o) const {
    return input == o.input && size == o.size && mtime_ns == o.mtime_ns && settings == o.settings;
  }
  bool operator!=(const Fingerprint& o) const { return !(*this == o); }
  std::string str() const;  // for logs
};

// A finished chunk: its segment is complete at `segment` (a file name in the farm folder).
struct ChunkRecord {
  int64_t first_frame = 0;
  int64_t last_frame = 0;  // inclusive; -1: to the end of the input
  Fingerprint fingerprint;
  std::string segment;
  int64_t frames = 0;  // frames in the segment
  int64_t first_pts = 0;
  int64_t last_pts = 0;
  int64_t segment_size = 0;  // bytes, and mtime, of the segment when it was recorded
  int64_t segment_mtime_ns = 0;
  double seconds = 0;  // time the chunk took
  std::string host;
};

// The last slice written by a chunk in progress (interrupted chunks keep theirs).
struct SliceRecord {
  int64_t chunk_first = 0;
  int64_t chunk_last = 0;
  int64_t slice = 0;
  int64_t frames_done = 0;  // frames of the chunk written so far
};

struct OutputRecord {
  Fingerprint fingerprint;
  int64_t frames = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

class Journal {
 public:
  // Opens (creating when `create`) the journal at `path`. Without `create`, a missing file throws
  // OutputError(kExitNoInput-like message) — use exists() first.
  Journal(const std::string& path, bool create = true);
  ~Journal();
  Journal(Journal&&) noexcept;
  Journal& operator=(Journal&&) noexcept;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& path() const { return path_; }

  // Cached plan (any text, e.g. JSON) under `key` (fingerprint and plan options).
  std::optional<std::string> plan(const std::string& key);
  void put_plan(const std::string& key, const std::string& value);
  // The keys of the cached plans that start with `prefix`.
  std::vector<std::string> plan_keys(const std::string& prefix);

  std::vector<ChunkRecord> chunks();
  std::optional<ChunkRecord> chunk(int64_t first_frame, int64_t last_frame);
  // Records a finished chunk (replacing a row for the same range) and clears its slices.
  void put_chunk(const ChunkRecord& record);
  // Removes the rows of chunks whose frames overlap [first, last] (last -1: to the end) and
  // returns them (their segments are stale).
  std::vector<ChunkRecord> remove_overlapping(int64_t first_frame, int64_t last_frame);

  void put_slice(const SliceRecord& record);
  std::optional<SliceRecord> last_slice(int64_t chunk_first, int64_t chunk_last);
  void clear_slices(int64_t chunk_first, int64_t chunk_last);

  std::optional<OutputRecord> output();
  void put_output(const OutputRecord& record);
  void clear_output();

 private:
  void exec(const char* sql);
  std::string path_;
  sqlite3* db_ = nullptr;
};

// Size and modification time of a file; nullopt when it does not exist.
struct FileStamp {
  int64_t size = 0;
  int64_t mtime_ns = 0;
};
std::optional<FileStamp> stamp_file(const std::string& path);

// 64-bit FNV-1a of `text` as 16 hex digits: a stable (cross-build, cross-host) settings hash.
std::string stable_hash(const std::string& text);

}  // namespace wm::sched
