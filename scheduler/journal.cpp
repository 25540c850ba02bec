#include "scheduler/journal.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "scheduler/sqlite.h"
#include "src/base/error.h"

namespace wm::sched {
namespace {

// A journal error: a damaged file says how to recover (scheduler/sqlite.h).
[[noreturn]] void journal_error(sqlite3* db, const std::string& path, const std::string& what,
                                int code) {
  sqlite_fail(db, path, "journal", what, code);
}

constexpr int kBusyTimeoutMs = 60000;

const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES('schema', '1');
CREATE TABLE IF NOT EXISTS plans(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks(
  first_frame INTEGER NOT NULL, last_frame INTEGER NOT NULL,
  input TEXT NOT NULL, input_size INTEGER NOT NULL, input_mtime_ns INTEGER NOT NULL,
  settings TEXT NOT NULL, segment TEXT NOT NULL, frames INTEGER NOT NULL,
  first_pts INTEGER NOT NULL, last_pts INTEGER NOT NULL,
  segment_size INTEGER NOT NULL, segment_mtime_ns INTEGER NOT NULL,
  seconds REAL NOT NULL, host TEXT NOT NULL, finished_at TEXT NOT NULL DEFAULT (datetime('now')),
  PRIMARY KEY(first_frame, last_frame));
CREATE TABLE IF NOT EXISTS slices(
  chunk_first INTEGER NOT NULL, chunk_last INTEGER NOT NULL, slice INTEGER NOT NULL,
  frames_done INTEGER NOT NULL, at TEXT NOT NULL DEFAULT (datetime('now')),
  PRIMARY KEY(chunk_first, chunk_last, slice));
CREATE TABLE IF NOT EXISTS output(
  id INTEGER PRIMARY KEY CHECK(id = 1),
  input TEXT NOT NULL, input_size INTEGER NOT NULL, input_mtime_ns INTEGER NOT NULL,
  settings TEXT NOT NULL, frames INTEGER NOT NULL, size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL, at TEXT NOT NULL DEFAULT (datetime('now')));
)SQL";

const char* kChunkColumns =
    "first_frame, last_frame, input, input_size, input_mtime_ns, settings, segment, frames, "
    "first_pts, last_pts, segment_size, segment_mtime_ns, seconds, host";

ChunkRecord read_chunk(const Statement& s) {
  ChunkRecord r;
  r.first_frame = s.integer(0);
  r.last_frame = s.integer(1);
  r.fingerprint.input = s.text(2);
  r.fingerprint.size = s.integer(3);
  r.fingerprint.mtime_ns = s.integer(4);
  r.fingerprint.settings = s.text(5);
  r.segment = s.text(6);
  r.frames = s.integer(7);
  r.first_pts = s.integer(8);
  r.last_pts = s.integer(9);
  r.segment_size = s.integer(10);
  r.segment_mtime_ns = s.integer(11);
  r.seconds = s.real(12);
  r.host = s.text(13);
  return r;
}

}  // namespace

std::string Fingerprint::str() const {
  return input + " (" + std::to_string(size) + " bytes, mtime " + std::to_string(mtime_ns) +
         " ns, settings " + settings + ")";
}

std::optional<FileStamp> stamp_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  FileStamp s;
  s.size = int64_t(st.st_size);
  s.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return s;
}

std::string stable_hash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Journal::Journal(const std::string& path, bool create) : path_(path) {
  const int flags =
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw OutputError(path + ": cannot open the farm journal: " + message,
                      create ? kExitCantCreat : kExitNoInput);
  }
  // A throwing constructor never runs ~Journal: close the connection (and its file) here when
  // the file turns out damaged (found by the sanitizer build's leak check).
  try {
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    exec("PRAGMA synchronous=FULL");
    // DELETE (the default) rather than WAL: WAL needs shared memory, which network filesystems
    // do not share between hosts.
    exec("PRAGMA journal_mode=DELETE");
    WriteTransaction tx(db_, path_);
    exec(kSchema);
    tx.commit();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Journal::~Journal() {
  if (db_) sqlite3_close(db_);
}

Journal::Journal(Journal&& other) noexcept : path_(std::move(other.path_)), db_(other.db_) {
  other.db_ = nullptr;
}

Journal& Journal::operator=(Journal&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close(db_);
    path_ = std::move(other.path_);
    db_ = other.db_;
    other.db_ = nullptr;
  }
  return *this;
}

void Journal::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    journal_error(db_, path_, text, kExitIoErr);
  }
}

std::optional<std::string> Journal::plan(const std::string& key) {
  Statement s(db_, path_, "SELECT value FROM plans WHERE key = ?1");
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

std::vector<std::string> Journal::plan_keys(const std::string& prefix) {
  Statement s(db_, path_, "SELECT key FROM plans WHERE substr(key, 1, length(?1)) = ?1");
  s.bind(1, prefix);
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

void Journal::put_plan(const std::string& key, const std::string& value) {
  Statement s(db_, path_, "INSERT OR REPLACE INTO plans(key, value) VALUES(?1, ?2)");
  s.bind(1, key).bind(2, value);
  s.step();
}

std::vector<ChunkRecord> Journal::chunks() {
  Statement s(
      db_, path_,
      (std::string("SELECT ") + kChunkColumns + " FROM chunks ORDER BY first_frame").c_str());
  std::vector<ChunkRecord> out;
  while (s.step()) out.push_back(read_chunk(s));
  return out;
}

std::optional<ChunkRecord> Journal::chunk(int64_t first_frame, int64_t last_frame) {
  Statement s(db_, path_,
              (std::string("SELECT ") + kChunkColumns +
               " FROM chunks WHERE first_frame = ?1 AND last_frame = ?2")
                  .c_str());
  s.bind(1, first_frame).bind(2, last_frame);
  if (!s.step()) return std::nullopt;
  return read_chunk(s);
}

void Journal::put_chunk(const ChunkRecord& r) {
  WriteTransaction tx(db_, path_);
  {
    Statement s(db_, path_,
                (std::string("INSERT OR REPLACE INTO chunks(") + kChunkColumns +
                 ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)")
                    .c_str());
    s.bind(1, r.first_frame)
        .bind(2, r.last_frame)
        .bind(3, r.fingerprint.input)
        .bind(4, r.fingerprint.size)
        .bind(5, r.fingerprint.mtime_ns)
        .bind(6, r.fingerprint.settings)
        .bind(7, r.segment)
        .bind(8, r.frames)
        .bind(9, r.first_pts)
        .bind(10, r.last_pts)
        .bind(11, r.segment_size)
        .bind(12, r.segment_mtime_ns)
        .bind(13, r.seconds)
        .bind(14, r.host);
    s.step();
  }
  {
    Statement s(db_, path_, "DELETE FROM slices WHERE chunk_first = ?1 AND chunk_last = ?2");
    s.bind(1, r.first_frame).bind(2, r.last_frame);
    s.step();
  }
  tx.commit();
}

std::vector<ChunkRecord> Journal::remove_overlapping(int64_t first_frame, int64_t last_frame) {
  // Ranges [a, b] and [c, d] (-1 = infinity) overlap when a <= d' and c <= b'.
  const char* where =
      " WHERE first_frame <= (CASE WHEN ?2 < 0 THEN 9223372036854775807 ELSE ?2 END)"
      " AND (last_frame < 0 OR last_frame >= ?1)";
  WriteTransaction tx(db_, path_);
  std::vector<ChunkRecord> removed;
  {
    Statement s(db_, path_,
                (std::string("SELECT ") + kChunkColumns + " FROM chunks" + where).c_str());
    s.bind(1, first_frame).bind(2, last_frame);
    while (s.step()) removed.push_back(read_chunk(s));
  }
  {
    Statement s(db_, path_, (std::string("DELETE FROM chunks") + where).c_str());
    s.bind(1, first_frame).bind(2, last_frame);
    s.step();
  }
  tx.commit();
  return removed;
}

void Journal::put_slice(const SliceRecord& r) {
  Statement s(db_, path_,
              "INSERT OR REPLACE INTO slices(chunk_first, chunk_last, slice, frames_done) "
              "VALUES(?1, ?2, ?3, ?4)");
  s.bind(1, r.chunk_first).bind(2, r.chunk_last).bind(3, r.slice).bind(4, r.frames_done);
  s.step();
}

std::optional<SliceRecord> Journal::last_slice(int64_t chunk_first, int64_t chunk_last) {
  Statement s(db_, path_,
              "SELECT slice, frames_done FROM slices WHERE chunk_first = ?1 AND chunk_last = ?2 "
              "ORDER BY slice DESC LIMIT 1");
  s.bind(1, chunk_first).bind(2, chunk_last);
  if (!s.step()) return std::nullopt;
  SliceRecord r;
  r.chunk_first = chunk_first;
  r.chunk_last = chunk_last;
  r.slice = s.integer(0);
  r.frames_done = s.integer(1);
  return r;
}

void Journal::clear_slices(int64_t chunk_first, int64_t chunk_last) {
  Statement s(db_, path_, "DELETE FROM slices WHERE chunk_first = ?1 AND chunk_last = ?2");
  s.bind(1, chunk_first).bind(2, chunk_last);
  s.step();
}

std::optional<OutputRecord> Journal::output() {
  Statement s(db_, path_,
              "SELECT input, input_size, input_mtime_ns, settings, frames, size, mtime_ns "
              "FROM output WHERE id = 1");
  if (!s.step()) return std::nullopt;
  OutputRecord r;
  r.fingerprint.input = s.text(0);
  r.fingerprint.size = s.integer(1);
  r.fingerprint.mtime_ns = s.integer(2);
  r.fingerprint.settings = s.text(3);
  r.frames = s.integer(4);
  r.size = s.integer(5);
  r.mtime_ns = s.integer(6);
  return r;
}

void Journal::put_output(const OutputRecord& r) {
  Statement s(db_, path_,
              "INSERT OR REPLACE INTO output(id, input, input_size, input_mtime_ns, settings, "
              "frames, size, mtime_ns) VALUES(1, ?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  s.bind(1, r.fingerprint.input)
      .bind(2, r.fingerprint.size)
      .bind(3, r.fingerprint.mtime_ns)
      .bind(4, r.fingerprint.settings)
      .bind(5, r.frames)
      .bind(6, r.size)
      .bind(7, r.mtime_ns);
  s.step();
}

void Journal::clear_output() { exec("DELETE FROM output"); }

}  // namespace wm::sched
