// The HTTP status page: "/" the HTML page ("/?refresh=N": it reloads every N s, 0 never; 2 by
// default), "/api/status" the JSON snapshot, "/metrics" Prometheus text (watch/status.h renders
// them), by GET and HEAD; it serves the snapshot, never files. One answer per connection
// (`Connection: close`).
//
// Actions, by POST: "/api/retry" (form field `id`: a failed file's queue id), "/api/pause",
// "/api/resume", handed to the `actions` callback. Taken only when all of these hold, else 403:
//  - the peer is 127.0.0.1 or ::1 (a page on 0.0.0.0 serves other hosts read-only);
//  - Host is this page's loopback address (127.0.0.1:PORT, localhost:PORT or [::1]:PORT), so a
//    web page whose name was made to resolve to 127.0.0.1 (DNS rebinding) is refused;
//  - Origin, when sent (browsers send it with every POST), is http:// and that same host, so a
//    form on another site cannot post here (CSRF);
//  - the token given at construction (the daemon makes one per start and logs it) is in the
//    form field `token` or the header `X-Wmbatch-Token`.
// The HTML page carries the token (in its forms) only to a request that passes the first two
// checks. A POST body is at most kMaxBody bytes (413), sized by one Content-Length (411 when
// chunked or given twice; none: no body).
// Every refusal is one line of text: 403 token/peer/host, 404 unknown path (or unknown file,
// from the callback), 405 wrong method (with Allow), 409 the file is not in a state to retry.
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
// Threading: the server runs on a thread of its own; `snapshot` and `actions` are called from it
// (one call at a time) and must be thread-safe. An action holds the page while it runs (a retry
// that moves its source back across file systems copies it).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace wm::watch {

// A POST action: "retry" (of the file `id`), "pause" or "resume".
struct Action {
  std::string name;
  int64_t id = 0;
};
// Its outcome: `status` 303 (done: the browser goes back to the page) or an error status, and
// one line for the person who asked.
struct ActionResult {
  int status = 303;
  std::string message;
};

class StatusServer {
 public:
  static constexpr double kHeadSeconds = 10;  // the whole request, head and body
  static constexpr double kWriteSeconds = 10;
  static constexpr size_t kMaxHead = 8192;
  static constexpr size_t kMaxBody = 4096;

  // Binds host:port (port 0: any free port) and starts serving. Throws wm::Error
  // (kExitCantCreat) when the address cannot be bound. `token`: what a POST must carry; with no
  // `actions` every POST is refused (405).
  StatusServer(const std::string& host, int port, std::function<nlohmann::json()> snapshot,
               std::string token = "", std::function<ActionResult(const Action&)> actions = {});
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
