// Helpers of the watch-folder tests (test_watch*.cpp): a folder set-up with its WATCH.yaml, the
// real `wmbatch watch` as a child process, the queue read with SQLite, HTTP GET over a socket.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {

// A guard against a hang, not a speed requirement: waits fail only after this long.
constexpr double kPatienceSeconds = 300;

// Polls `done` every 50 ms; false when it has not become true within kPatienceSeconds.
inline bool wait_until(const std::function<bool()>& done) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        kPatienceSeconds) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

inline int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

// One row of the queue, as the daemon recorded it.
struct QueueRow {
  int64_t id = 0;
  std::string input, state, output, last_error, source_now;
  int attempts = 0, failures = 0, interrupted = 0, exit_code = 0;
  double started_at = 0, finished_at = 0;
  bool disposed = false;  // the source kept, moved or deleted as its entry says
};

// Reads every row of the queue file (empty when it does not exist yet), by id.
inline std::vector<QueueRow> read_queue(const std::string& path) {
  std::vector<QueueRow> rows;
  if (!exists(path)) return rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return rows;
  }
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* s = nullptr;
  const char* sql =
      "SELECT id, input, state, output, last_error, source_now, attempts, failures, interrupted, "
      "exit_code, started_at, finished_at, disposed FROM items ORDER BY id";
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) == SQLITE_OK) {
    auto text = [&](int c) {
      const auto* p = sqlite3_column_text(s, c);
      return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
    };
    while (sqlite3_step(s) == SQLITE_ROW) {
      QueueRow r;
      r.id = sqlite3_column_int64(s, 0);
      r.input = text(1);
      r.state = text(2);
      r.output = text(3);
      r.last_error = text(4);
      r.source_now = text(5);
      r.attempts = sqlite3_column_int(s, 6);
      r.failures = sqlite3_column_int(s, 7);
      r.interrupted = sqlite3_column_int(s, 8);
      r.exit_code = sqlite3_column_int(s, 9);
      r.started_at = sqlite3_column_double(s, 10);
      r.finished_at = sqlite3_column_double(s, 11);
      r.disposed = sqlite3_column_int(s, 12) != 0;
      rows.push_back(r);
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return rows;
}

// One chunk of an item (resume within a file): how often its work started, whether it finished
// and how many starts it had then (starts == starts_at_done: no work on it after it finished).
struct ChunkRowT {
  int64_t first_frame = 0, last_frame = 0, frames = 0;
  int starts = 0, starts_at_done = 0;
  bool done = false;
};

// The queue's chunk rows by item id.
inline std::map<int64_t, std::vector<ChunkRowT>> read_chunks(const std::string& path) {
  std::map<int64_t, std::vector<ChunkRowT>> out;
  sqlite3* db = nullptr;
  if (!exists(path) ||
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* s = nullptr;
  const char* sql =
      "SELECT item, first_frame, last_frame, frames, starts, starts_at_done, done FROM chunks "
      "ORDER BY item, first_frame";
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) == SQLITE_OK) {
    while (sqlite3_step(s) == SQLITE_ROW) {
      ChunkRowT c;
      c.first_frame = sqlite3_column_int64(s, 1);
      c.last_frame = sqlite3_column_int64(s, 2);
      c.frames = sqlite3_column_int64(s, 3);
      c.starts = sqlite3_column_int(s, 4);
      c.starts_at_done = sqlite3_column_int(s, 5);
      c.done = sqlite3_column_int(s, 6) != 0;
      out[sqlite3_column_int64(s, 0)].push_back(c);
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

inline int count_state(const std::vector<QueueRow>& rows, const std::string& state) {
  int n = 0;
  for (const auto& r : rows) n += r.state == state;
  return n;
}

// A TCP connection to 127.0.0.1:port (the descriptor), or -1.
inline int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// An HTTP answer: the status line's code (-1: none), the head and the body.
struct HttpAnswer {
  int code = -1;
  std::string head, body;
};

// Sends `request` (bytes as they are) over the connection `fd` (closed here) and reads the answer.
inline HttpAnswer http_exchange_fd(int fd, const std::string& request) {
  HttpAnswer out;
  if (fd < 0) return out;
  // A guard against a hang (a server that never answers fails the test), not a speed bound.
  timeval patience{time_t(kPatienceSeconds), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  if (::write(fd, request.data(), request.size()) != ssize_t(request.size())) {
    ::close(fd);
    return out;
  }
  std::string response;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) response.append(buf, size_t(n));
  ::close(fd);
  const size_t head_end = response.find("\r\n\r\n");
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) return out;
  out.code = std::stoi(response.substr(9, 3));
  out.head = response.substr(0, head_end);
  out.body = response.substr(head_end + 4);
  return out;
}

// HTTP/1.1 GET over a socket to 127.0.0.1:port; returns the status line's code and the body.
inline std::pair<int, std::string> http_get(int port, const std::string& path) {
  const HttpAnswer a =
      http_exchange_fd(connect_local(port), "GET " + path +
                                                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                                                "close\r\n\r\n");
  return {a.code, a.body};
}

// An HTTP/1.1 POST of `body` (a form) to 127.0.0.1:port, Host 127.0.0.1:port unless `headers`
// give one ("Name: value\r\n" lines).
inline HttpAnswer http_post(int port, const std::string& path, const std::string& body,
                            const std::string& headers = "") {
  std::string head = "POST " + path + " HTTP/1.1\r\n";
  if (headers.find("Host:") == std::string::npos) {
    head += "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
  }
  head += headers + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  return http_exchange_fd(connect_local(port), head + body);
}

// Prometheus text as {series: value} ("name" or "name{labels}").
inline std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// A watched folder set-up in a temp dir: in/ (watched), out/, done/, failed/, WATCH.yaml
// (written by write_config) and the daemon's log files.
class WatchSetup {
 public:
  explicit WatchSetup(const std::string& tag) : dir_("watch-" + tag) {
    for (const char* sub : {"in", "out", "done", "failed"}) {
      std::filesystem::create_directories(dir_.file(sub));
    }
  }
  const TempDir& dir() const { return dir_; }
  std::string in(const std::string& name) const { return dir_.file("in/" + name); }
  std::string out(const std::string& name) const { return dir_.file("out/" + name); }
  std::string watch_file() const { return dir_.file("WATCH.yaml"); }
  std::string queue_file() const { return dir_.file("WATCH.wmwatch.sqlite"); }

  // A WATCH.yaml watching in/ with the built-in lanczos ×2 upscaler into out/{stem}_x2.mp4;
  // `top` and `entry` add keys (YAML lines) at the top level and to the entry.
  void write_config(const std::string& top = "", const std::string& entry = "") const {
    write_text(watch_file(), "settle_seconds: 0.3\npoll_seconds: 1\n" + top +
                                 "watch:\n"
                                 "  - folder: in\n"
                                 "    job:\n"
                                 "      task: upscale\n"
                                 "      model: {kind: lanczos, scale: 2}\n"
                                 "      encode: {codec: libx264, preset: ultrafast, crf: 20}\n"
                                 "    output: out/{stem}_x2.mp4\n"
                                 "    failed_folder: failed\n" +
                                 entry);
  }

  // Starts `wmbatch watch` (log: log-<n>.txt) and waits until it watches.
  Background& start() {
    log_ = dir_.file("log-" + std::to_string(runs_++) + ".txt");
    daemon_ = std::make_unique<Background>(
        std::vector<std::string>{wmbatch_path(), "watch", watch_file(), "--log-level", "debug"},
        log_);
    EXPECT_TRUE(wait_until([&] {
      return log().find("watching ") != std::string::npos || daemon_->exited();
    })) << log();
    return *daemon_;
  }
  Background& daemon() { return *daemon_; }
  std::string log() const { return log_.empty() ? "" : read_text(log_); }
  // Every run's log, in order.
  std::string all_logs() const {
    std::string all;
    for (int i = 0; i < runs_; ++i)
      all += read_text(dir_.file("log-" + std::to_string(i) + ".txt"));
    return all;
  }
  // SIGTERM, then the exit status.
  int stop() {
    daemon_->signal(SIGTERM);
    return daemon_->wait();
  }
  std::vector<QueueRow> queue() const { return read_queue(queue_file()); }
  // Waits until `n` items are done or failed.
  bool wait_finished(int n) const {
    return wait_until([&] {
      const auto rows = queue();
      return count_state(rows, "done") + count_state(rows, "failed") >= n;
    });
  }
  // Waits until `n` items are done or failed with their sources kept, moved or deleted.
  bool wait_until_disposed(int n) const {
    return wait_until([&] {
      int disposed = 0;
      for (const QueueRow& r : queue()) disposed += r.disposed;
      return disposed >= n;
    });
  }
  // Waits until the queue records a chunk of any item done (resume within a file) while the
  // running daemon lives; `each`, when given, runs at every poll. False when the daemon exited.
  bool wait_chunk_done(const std::function<void()>& each = {}) const {
    return wait_until([&] {
             if (each) each();
             for (const auto& [item, rows] : read_chunks(queue_file())) {
               for (const ChunkRowT& c : rows) {
                 if (c.done) return true;
               }
             }
             return daemon_->exited();
           }) &&
           !daemon_->exited();
  }
  // The running daemon's last finished rescan (its `scan N done: K file(s) settling` debug
  // line): N (0 before the first) and K, the files it left settling (-1 before the first).
  std::pair<int, int> last_scan() const {
    const std::string text = log();
    static const std::regex kScan("scan ([0-9]+) done: ([0-9]+) file");
    std::pair<int, int> last{0, -1};
    for (std::sregex_iterator it(text.begin(), text.end(), kScan), end; it != end; ++it) {
      last = {std::stoi((*it)[1]), std::stoi((*it)[2])};
    }
    return last;
  }
  int scans() const { return last_scan().first; }
  // Waits until `more` rescans finished after this call: each walked every folder, checked what
  // settled and queued it, so what the daemon would take from the folders as they are now, it
  // has taken once two have (a scan under way at the call may have walked the folders before).
  bool wait_scans(int more) const {
    const int from = scans();
    return wait_until([&] { return scans() >= from + more || daemon_->exited(); }) &&
           !daemon_->exited();
  }
  // The status page's port, from the daemon's log.
  int http_port() const {
    std::smatch m;
    const std::string text = log();
    if (!std::regex_search(text, m,
                           std::regex("status page on http://127\\.0\\.0\\.1:([0-9]+)/"))) {
      return -1;
    }
    return std::stoi(m[1]);
  }
  // The status page's action token, from the daemon's log ("" when not there).
  std::string token() const {
    std::smatch m;
    const std::string text = log();
    if (!std::regex_search(text, m, std::regex("status page actions token: ([0-9a-f]{32})"))) {
      return "";
    }
    return m[1];
  }

 private:
  TempDir dir_;
  std::string log_;
  int runs_ = 0;
  std::unique_ptr<Background> daemon_;
};

// A small clip (64×48, 8 frames, H.264 + AAC) to copy into the watched folder.
inline void make_small_clip(const std::string& path, int frames = 8, int width = 64,
                            int height = 48) {
  ClipSpec spec;
  spec.width = width;
  spec.height = height;
  spec.frames = frames;
  make_clip(path, spec);
}

}  // namespace wm::test
