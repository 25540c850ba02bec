// The read-only HTTP status page: "/" the HTML page, "/api/status" the JSON snapshot, "/metrics"
// Prometheus text (watch/status.h renders them). GET and HEAD only; it serves the snapshot,
// never files. One answer per connection (`Connection: close`).
//
// Built to stay up under clients that misbehave, on purpose or not:
//  - one thread, poll(2), non-blocking sockets: a slow client holds no thread;
//  - a request head must arrive whole within kHeadSeconds of the connection (a client sending a
//    header byte every few seconds is closed then), and be at most kMaxHead bytes (431); an
//    answer must be taken within kWriteSeconds;
//  - at most max_connections() connections at once (32, and never more than a quarter of the
//    process's descriptor limit): a new one beyond that closes the oldest, so a flood of idle
//    connections neither uses up the daemon's descriptors (which its jobs need) nor keeps a new
//    client such as a Prometheus scrape out;
//  - when the process has no descriptor left (EMFILE), a spare one is let go to accept and close
//    the waiting connection, so the listening socket does not spin.
// Requests are parsed by watch/http_request.h.
//
// Threading: the server runs on a thread of its own; `snapshot` is called from it (one call at a
// time) and must be thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace wm::watch {

class StatusServer {
 public:
  static constexpr double kHeadSeconds = 10;
  static constexpr double kWriteSeconds = 10;
  static constexpr size_t kMaxHead = 8192;

  // Binds host:port (port 0: any free port) and starts serving. Throws wm::Error
  // (kExitCantCreat) when the address cannot be bound.
  StatusServer(const std::string& host, int port, std::function<nlohmann::json()> snapshot);
  ~StatusServer();  // stops serving; open connections are closed
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const { return port_; }
  size_t max_connections() const { return max_connections_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  int port_ = 0;
  size_t max_connections_ = 0;
};

}  // namespace wm::watch
