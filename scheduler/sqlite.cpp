#include "scheduler/sqlite.h"

namespace wm::sched {

void sqlite_fail(sqlite3* db, const std::string& file, const std::string& what,
                 const std::string& message, int code) {
  const int primary = db ? sqlite3_extended_errcode(db) & 0xff : 0;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) {
    const std::string how = what == "journal"
                                ? "it cannot say which segments are whole. To recover, remove " +
                                      file.substr(0, file.find_last_of('/')) +
                                      " (its segments and journal) and run the chunks again"
                                : "to recover, move it aside (a new one is made)";
    throw OutputError(file + ": the " + (what == "journal" ? "farm journal" : what) +
                          " is damaged (" + message + "); " + how,
                      kExitDataErr);
  }
  throw OutputError(file + ": " + what + " " + message, code);
}

}  // namespace wm::sched
