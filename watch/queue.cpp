#include "watch/queue.h"

#include <sqlite3.h>
#include <sys/statfs.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "scheduler/sqlite.h"
#include "src/base/error.h"
#include "src/base/fs.h"

namespace wm::watch {
namespace {

using sched::Statement;
using sched::WriteTransaction;

constexpr int kBusyTimeoutMs = 60000;
constexpr const char* kWhat = "queue";

const char* kSchema = R"SQL(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES('schema', '1');
CREATE TABLE IF NOT EXISTS items(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  input TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
  settings TEXT NOT NULL, folder TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'queued',
  attempts INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
  interrupted INTEGER NOT NULL DEFAULT 0, exit_code INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '', output TEXT NOT NULL DEFAULT '',
  committing INTEGER NOT NULL DEFAULT 0, disposed INTEGER NOT NULL DEFAULT 0,
  source_now TEXT NOT NULL DEFAULT '', devices TEXT NOT NULL DEFAULT '',
  frames INTEGER NOT NULL DEFAULT 0, frames_total INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0,
  queued_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL DEFAULT 0,
  UNIQUE(input, size, mtime_ns, settings));
CREATE INDEX IF NOT EXISTS items_state ON items(state, id);
CREATE TABLE IF NOT EXISTS chunks(
  item INTEGER NOT NULL, first_frame INTEGER NOT NULL, last_frame INTEGER NOT NULL,
  starts INTEGER NOT NULL DEFAULT 0, done INTEGER NOT NULL DEFAULT 0,
  starts_at_done INTEGER NOT NULL DEFAULT 0, frames INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(item, first_frame, last_frame));
)SQL";

const char* kColumns =
    "id, input, size, mtime_ns, settings, folder, state, attempts, failures, interrupted, "
    "exit_code, last_error, output, committing, disposed, source_now, frames, frames_total, "
    "seconds, queued_at, started_at, finished_at, next_attempt_at, devices";

ItemState state_of(const std::string& s) {
  if (s == "running") return ItemState::kRunning;
  if (s == "done") return ItemState::kDone;
  if (s == "failed") return ItemState::kFailed;
  return ItemState::kQueued;
}

Item read_item(const Statement& s) {
  Item r;
  r.id = s.integer(0);
  r.input = s.text(1);
  r.size = s.integer(2);
  r.mtime_ns = s.integer(3);
  r.settings = s.text(4);
  r.folder = s.text(5);
  r.state = state_of(s.text(6));
  r.attempts = int(s.integer(7));
  r.failures = int(s.integer(8));
  r.interrupted = int(s.integer(9));
  r.exit_code = int(s.integer(10));
  r.last_error = s.text(11);
  r.output = s.text(12);
  r.committing = s.integer(13) != 0;
  r.disposed = s.integer(14) != 0;
  r.source_now = s.text(15);
  r.frames = s.integer(16);
  r.frames_total = s.integer(17);
  r.seconds = s.real(18);
  r.queued_at = s.real(19);
  r.started_at = s.real(20);
  r.finished_at = s.real(21);
  r.next_attempt_at = s.real(22);
  r.devices = s.text(23);
  return r;
}

// File systems whose hosts do not share WAL's shared-memory index.
bool on_network_fs(const std::string& path) {
  struct statfs st {};
  if (::statfs(fs::parent_dir(path).c_str(), &st) != 0) return false;
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0x6969:      // NFS
    case 0x517B:      // SMB
    case 0xFF534D42:  // CIFS
    case 0xFE534D42:  // SMB2
    case 0x65735546:  // FUSE (sshfs, s3fs, ...)
    case 0x00C36400:  // Ceph
    case 0x5346414F:  // AFS
    case 0x01021997:  // 9p
    case 0x0BD00BD0:  // Lustre
    case 0x47504653:  // GPFS
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* to_string(ItemState s) {
  switch (s) {
    case ItemState::kRunning:
      return "running";
    case ItemState::kDone:
      return "done";
    case ItemState::kFailed:
      return "failed";
    case ItemState::kQueued:
    default:
      return "queued";
  }
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string utc_text(double unix_seconds, const char* format) {
  if (unix_seconds <= 0) return "";
  const std::time_t t = std::time_t(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

Queue::Queue(const std::string& path) : path_(path) {
  fs::make_dirs(fs::parent_dir(path));
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw OutputError(path + ": cannot open the watch queue: " + message, kExitCantCreat);
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  exec("PRAGMA synchronous=FULL");
  wal_ = !on_network_fs(path);
  exec(wal_ ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
  WriteTransaction tx(db_, path_, kWhat);
  exec(kSchema);
  // A queue made before `devices` was recorded gains the column (empty for its items).
  bool has_devices = false;
  {
    Statement s(db_, path_, "SELECT 1 FROM pragma_table_info('items') WHERE name = 'devices'",
                kWhat);
    has_devices = s.step();
  }
  if (!has_devices) exec("ALTER TABLE items ADD COLUMN devices TEXT NOT NULL DEFAULT ''");
  tx.commit();
}

Queue::~Queue() {
  if (db_) sqlite3_close(db_);
}

void Queue::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    throw OutputError(path_ + ": queue: " + text, kExitIoErr);
  }
}

bool Queue::enqueue(const std::string& input, int64_t size, int64_t mtime_ns,
                    const std::string& settings, const std::string& folder) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "INSERT OR IGNORE INTO items(input, size, mtime_ns, settings, folder, queued_at) "
              "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
              kWhat);
  s.bind(1, input).bind(2, size).bind(3, mtime_ns).bind(4, settings).bind(5, folder);
  s.bind(6, unix_now());
  s.step();
  return sqlite3_changes(db_) > 0;
}

bool Queue::known(const std::string& input, int64_t size, int64_t mtime_ns,
                  const std::string& settings) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "SELECT 1 FROM items WHERE input = ?1 AND size = ?2 AND mtime_ns = ?3 AND "
              "settings = ?4",
              kWhat);
  s.bind(1, input).bind(2, size).bind(3, mtime_ns).bind(4, settings);
  return s.step();
}

int Queue::recover() {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "UPDATE items SET state = 'queued', interrupted = interrupted + 1, "
              "next_attempt_at = 0 WHERE state = 'running'",
              kWhat);
  s.step();
  return sqlite3_changes(db_);
}

std::optional<Item> Queue::claim(double now, std::string* held) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (held) held->clear();
  WriteTransaction tx(db_, path_, kWhat);
  std::optional<Item> item;
  {
    Statement p(db_, path_, "SELECT 1 FROM meta WHERE key = 'paused' AND value = '1'", kWhat);
    const bool paused = p.step();
    Statement s(db_, path_,
                (std::string("SELECT ") + kColumns +
                 " FROM items WHERE state = 'queued' AND next_attempt_at <= ?1 ORDER BY id LIMIT 1")
                    .c_str(),
                kWhat);
    s.bind(1, now);
    if (!s.step()) return std::nullopt;
    if (paused) {
      if (held) *held = s.text(1);
      return std::nullopt;
    }
    item = read_item(s);
  }
  Statement u(db_, path_, "UPDATE items SET state = 'running', started_at = ?2 WHERE id = ?1",
              kWhat);
  u.bind(1, item->id).bind(2, now);
  u.step();
  tx.commit();
  item->state = ItemState::kRunning;
  item->started_at = now;
  return item;
}

void Queue::set_paused(bool paused) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "INSERT OR REPLACE INTO meta(key, value) VALUES('paused', ?1)", kWhat);
  s.bind(1, std::string(paused ? "1" : "0"));
  s.step();
}

bool Queue::paused() {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "SELECT 1 FROM meta WHERE key = 'paused' AND value = '1'", kWhat);
  return s.step();
}

void Queue::begin_attempt(int64_t id, const std::string& output, const std::string& devices) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "UPDATE items SET attempts = attempts + 1, output = ?2, devices = ?3, frames = 0, "
              "frames_total = 0 WHERE id = ?1",
              kWhat);
  s.bind(1, id).bind(2, output).bind(3, devices);
  s.step();
}

void Queue::set_progress(int64_t id, int64_t frames, int64_t frames_total) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "UPDATE items SET frames = ?2, frames_total = ?3 WHERE id = ?1", kWhat);
  s.bind(1, id).bind(2, frames).bind(3, frames_total);
  s.step();
}

void Queue::chunk_started(int64_t id, int64_t first_frame, int64_t last_frame) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "INSERT INTO chunks(item, first_frame, last_frame, starts) VALUES(?1, ?2, ?3, 1) "
              "ON CONFLICT(item, first_frame, last_frame) DO UPDATE SET starts = starts + 1",
              kWhat);
  s.bind(1, id).bind(2, first_frame).bind(3, last_frame);
  s.step();
}

void Queue::chunk_done(int64_t id, int64_t first_frame, int64_t last_frame, int64_t frames) {
  std::lock_guard<std::mutex> lock(mutex_);
  // The first time only: starts_at_done then says whether a start came after it.
  Statement s(db_, path_,
              "INSERT INTO chunks(item, first_frame, last_frame, done, frames) "
              "VALUES(?1, ?2, ?3, 1, ?4) ON CONFLICT(item, first_frame, last_frame) DO UPDATE "
              "SET done = 1, starts_at_done = starts, frames = ?4 WHERE done = 0",
              kWhat);
  s.bind(1, id).bind(2, first_frame).bind(3, last_frame).bind(4, frames);
  s.step();
}

std::vector<ChunkRow> Queue::chunks(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "SELECT first_frame, last_frame, starts, done, starts_at_done, frames FROM chunks "
              "WHERE item = ?1 ORDER BY first_frame",
              kWhat);
  s.bind(1, id);
  std::vector<ChunkRow> out;
  while (s.step()) {
    ChunkRow r;
    r.first_frame = s.integer(0);
    r.last_frame = s.integer(1);
    r.starts = int(s.integer(2));
    r.done = s.integer(3) != 0;
    r.starts_at_done = int(s.integer(4));
    r.frames = s.integer(5);
    out.push_back(r);
  }
  return out;
}

void Queue::set_committing(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "UPDATE items SET committing = 1 WHERE id = ?1", kWhat);
  s.bind(1, id);
  s.step();
}

void Queue::set_done(int64_t id, int64_t frames, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "UPDATE items SET state = 'done', frames = ?2, seconds = ?3, finished_at = ?4, "
              "committing = 0, exit_code = 0 WHERE id = ?1",
              kWhat);
  s.bind(1, id).bind(2, frames).bind(3, seconds).bind(4, unix_now());
  s.step();
}

void Queue::set_retry(int64_t id, int exit_code, const std::string& error, double next_attempt_at) {
  record_failure(id, exit_code, error, ItemState::kQueued, next_attempt_at);
}

void Queue::set_failed(int64_t id, int exit_code, const std::string& error) {
  record_failure(id, exit_code, error, ItemState::kFailed, unix_now());
}

void Queue::record_failure(int64_t id, int exit_code, const std::string& error, ItemState state,
                           double at) {
  std::lock_guard<std::mutex> lock(mutex_);
  // `at`: when a queued item is due again, or when a failed one finished.
  Statement s(db_, path_,
              "UPDATE items SET state = ?5, failures = failures + 1, exit_code = ?2, "
              "last_error = ?3, committing = 0, "
              "next_attempt_at = CASE WHEN ?5 = 'queued' THEN ?4 ELSE next_attempt_at END, "
              "finished_at = CASE WHEN ?5 = 'failed' THEN ?4 ELSE finished_at END WHERE id = ?1",
              kWhat);
  s.bind(1, id).bind(2, int64_t(exit_code)).bind(3, error).bind(4, at);
  s.bind(5, std::string(to_string(state)));
  s.step();
}

void Queue::set_interrupted(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "UPDATE items SET state = 'queued', interrupted = interrupted + 1, "
              "next_attempt_at = 0 WHERE id = ?1",
              kWhat);
  s.bind(1, id);
  s.step();
}

void Queue::set_disposed(int64_t id, const std::string& source_now) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "UPDATE items SET disposed = 1, source_now = ?2 WHERE id = ?1", kWhat);
  s.bind(1, id).bind(2, source_now);
  s.step();
}

bool Queue::requeue_failed(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              "UPDATE items SET state = 'queued', disposed = 0, source_now = '', "
              "next_attempt_at = 0, committing = 0 WHERE id = ?1 AND state = 'failed' AND "
              "disposed = 1",
              kWhat);
  s.bind(1, id);
  s.step();
  return sqlite3_changes(db_) > 0;
}

void Queue::remove(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, "DELETE FROM items WHERE id = ?1", kWhat);
  s.bind(1, id);
  s.step();
}

std::optional<Item> Queue::item(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_, (std::string("SELECT ") + kColumns + " FROM items WHERE id = ?1").c_str(),
              kWhat);
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_item(s);
}

std::vector<Item> Queue::items(ItemState state, int limit, bool newest_first) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              (std::string("SELECT ") + kColumns + " FROM items WHERE state = ?1 ORDER BY id " +
               (newest_first ? "DESC" : "ASC") + " LIMIT ?2")
                  .c_str(),
              kWhat);
  s.bind(1, std::string(to_string(state))).bind(2, int64_t(limit));
  std::vector<Item> out;
  while (s.step()) out.push_back(read_item(s));
  return out;
}

std::vector<Item> Queue::history(int limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              (std::string("SELECT ") + kColumns +
               " FROM items WHERE state IN ('done', 'failed') ORDER BY finished_at DESC, id DESC "
               "LIMIT ?1")
                  .c_str(),
              kWhat);
  s.bind(1, int64_t(limit));
  std::vector<Item> out;
  while (s.step()) out.push_back(read_item(s));
  return out;
}

std::vector<Item> Queue::undisposed() {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, path_,
              (std::string("SELECT ") + kColumns +
               " FROM items WHERE state IN ('done', 'failed') AND disposed = 0 ORDER BY id")
                  .c_str(),
              kWhat);
  std::vector<Item> out;
  while (s.step()) out.push_back(read_item(s));
  return out;
}

std::map<ItemState, int64_t> Queue::counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<ItemState, int64_t> out{{ItemState::kQueued, 0},
                                   {ItemState::kRunning, 0},
                                   {ItemState::kDone, 0},
                                   {ItemState::kFailed, 0}};
  Statement s(db_, path_, "SELECT state, COUNT(*) FROM items GROUP BY state", kWhat);
  while (s.step()) out[state_of(s.text(0))] = s.integer(1);
  return out;
}

Totals Queue::totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  Totals t;
  Statement s(db_, path_,
              "SELECT COALESCE(SUM(state = 'done'), 0), COALESCE(SUM(state = 'failed'), 0), "
              "COALESCE(SUM(CASE WHEN state = 'done' THEN frames ELSE 0 END), 0), "
              "COALESCE(SUM(CASE WHEN state = 'done' THEN seconds ELSE 0 END), 0) FROM items",
              kWhat);
  if (s.step()) {
    t.done = s.integer(0);
    t.failed = s.integer(1);
    t.frames = s.integer(2);
    t.seconds = s.real(3);
  }
  return t;
}

}  // namespace wm::watch
