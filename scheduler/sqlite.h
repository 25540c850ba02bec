// Small RAII helpers over the SQLite C API, shared by the farm journal (scheduler/journal.h) and
// the watch-folder queue (watch/queue.h): a prepared statement and a write transaction. Errors
// throw OutputError naming the database file (`file`) and `what` ("journal", "queue"), through
// sqlite_fail.
//
// Thread-safety: as the connection they use (open it with SQLITE_OPEN_FULLMUTEX, or keep one
// connection per thread).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "src/base/error.h"

namespace wm::sched {

// Throws the error of a failed SQLite call on `file` (`what`: "journal", "queue"): OutputError
// with `code`, except for a damaged database (SQLITE_CORRUPT, SQLITE_NOTADB: torn by a broken
// file system, overwritten, truncated), which no retry fixes: that one says the file is damaged
// and how to recover (a farm journal: remove its `.wmfarm` folder and run the chunks again;
// another database: move it aside), with exit 65.
[[noreturn]] void sqlite_fail(sqlite3* db, const std::string& file, const std::string& what,
                              const std::string& message, int code);

// One prepared statement; finalised on destruction.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& file, const char* sql, const char* what = "journal")
      : db_(db), file_(file), what_(what) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v) {
    if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) fail("bind");
    return *this;
  }
  Statement& bind(int i, double v) {
    if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) fail("bind");
    return *this;
  }
  Statement& bind(int i, const std::string& v) {
    if (sqlite3_bind_text(stmt_, i, v.c_str(), int(v.size()), SQLITE_TRANSIENT) != SQLITE_OK) {
      fail("bind");
    }
    return *this;
  }
  // True while there is a row.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("step");
  }
  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }

 private:
  [[noreturn]] void fail(const char* op) const {
    const int code = sqlite3_extended_errcode(db_);
    sqlite_fail(db_, file_, what_, std::string(op) + " failed: " + sqlite3_errmsg(db_),
                (code & 0xff) == SQLITE_CANTOPEN ? kExitCantCreat : kExitIoErr);
  }
  sqlite3* db_;
  const std::string& file_;
  const char* what_;
  sqlite3_stmt* stmt_ = nullptr;
};

// A transaction that takes the write lock at once (BEGIN IMMEDIATE), so two writers never
// deadlock upgrading read locks; rolled back unless committed.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, const std::string& file, const char* what = "journal")
      : db_(db), file_(file), what_(what) {
    run("BEGIN IMMEDIATE");
  }
  ~WriteTransaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit() {
    run("COMMIT");
    done_ = true;
  }

 private:
  void run(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      std::string text = message ? message : sqlite3_errmsg(db_);
      sqlite3_free(message);
      sqlite_fail(db_, file_, what_, std::string(sql) + " failed: " + text, kExitIoErr);
    }
  }
  sqlite3* db_;
  const std::string& file_;
  const char* what_;
  bool done_ = false;
};

}  // namespace wm::sched
