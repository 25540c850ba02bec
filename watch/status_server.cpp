#include "watch/status_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <vector>

#include "src/base/error.h"
#include "src/base/log.h"
#include "watch/http_request.h"
#include "watch/status.h"

namespace wm::watch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kConnectionCap = 32;
constexpr double kLingerSeconds = 2;  // reading what a client still sends after the answer
constexpr int kAcceptsPerTurn = 64;

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// At most a quarter of the descriptor limit, so that the daemon's jobs keep the rest.
size_t connection_cap() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return kConnectionCap;
  }
  return std::clamp<size_t>(size_t(limit.rlim_cur / 4), 1, kConnectionCap);
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 303:
      return "See Other";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

std::string response(int status, const std::string& type, const std::string& body, bool head,
                     const std::string& extra = "") {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                    "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n" + extra +
                    "Connection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

std::string line_response(int status, const std::string& line, const std::string& extra = "") {
  return response(status, "text/plain; charset=utf-8", one_line(line) + "\n", false, extra);
}

// The page's own headers: no framing (a click on its buttons cannot be borrowed), no script, no
// referrer to other sites (same-origin, not no-referrer: with that a browser sends Origin: null
// with the page's own forms, which the actions refuse).
constexpr const char* kPageHeaders =
    "X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; style-src "
    "'unsafe-inline'; form-action 'self'; frame-ancestors 'none'\r\nReferrer-Policy: "
    "same-origin\r\n";

// Whether `peer` is 127.0.0.1 or ::1 (or 127.0.0.1 mapped into IPv6).
bool loopback(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr == htonl(INADDR_LOOPBACK);
  }
  if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    static const unsigned char kMapped[16] = {0, 0, 0,    0,    0,   0, 0, 0,
                                              0, 0, 0xff, 0xff, 127, 0, 0, 1};
    return std::memcmp(a.s6_addr, kMapped, 16) == 0;
  }
  return false;
}

// Equal in time independent of where they differ (the token).
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct Connection {
  enum class State { kReading, kWriting, kLingering };
  int fd = -1;
  bool loopback = false;  // the peer is 127.0.0.1 or ::1
  State state = State::kReading;
  std::string in;
  size_t scanned = 0;   // bytes of `in` known to hold no end of the head
  size_t need = 0;      // once the head of a POST is read: the bytes of head and body
  HttpRequest request;  // that head
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
};

// The Content-Length of a request (0 without one); npos when it is not a number.
size_t body_length(const HttpRequest& request) {
  const auto lengths = header_values(request, "content-length");
  if (lengths.empty()) return 0;
  const std::string& v = lengths.front();
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) {
    return std::string::npos;
  }
  return size_t(std::stoul(v));
}

}  // namespace

struct StatusServer::Impl {
  std::function<nlohmann::json()> snapshot;
  std::string token;
  std::function<ActionResult(const Action&)> actions;
  int port = 0;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int spare_fd = -1;  // let go of when no descriptor is left (EMFILE), to shed a connection
  size_t cap = kConnectionCap;
  std::atomic<bool> stop{false};
  std::list<Connection> connections;  // oldest first

  ~Impl() {
    for (Connection& c : connections) ::close(c.fd);
    for (int fd : {listen_fd, wake[0], wake[1], spare_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // Whether `request` names this page by its loopback address (Host), the only name under which
  // the page offers its actions.
  bool local_host(const HttpRequest& request) const {
    const auto hosts = header_values(request, "host");
    if (hosts.size() != 1) return false;
    const std::string p = ":" + std::to_string(port);
    for (const char* name : {"127.0.0.1", "localhost", "[::1]"}) {
      if (hosts[0] == name + p || (port == 80 && hosts[0] == name)) return true;
    }
    return false;
  }

  std::string act(const HttpRequest& request, bool peer_loopback) {
    if (!peer_loopback) return line_response(403, "actions are taken from 127.0.0.1 only");
    if (!local_host(request)) {
      return line_response(403, "actions need the page's loopback address as Host (127.0.0.1:" +
                                    std::to_string(port) + ")");
    }
    const auto origins = header_values(request, "origin");
    const std::string host = header_values(request, "host").front();
    if (origins.size() > 1 || (origins.size() == 1 && origins[0] != "http://" + host)) {
      return line_response(403, "actions are taken from this page only (Origin " +
                                    (origins.empty() ? "" : origins[0]) + " is not http://" + host +
                                    ")");
    }
    const size_t query = request.target.find('?');
    auto fields =
        parse_form(query == std::string::npos ? std::string_view()
                                              : std::string_view(request.target).substr(query + 1));
    for (auto& f : parse_form(request.body)) fields.push_back(std::move(f));
    std::vector<std::string> tokens = header_values(request, "x-wmbatch-token");
    std::string id_text;
    for (const auto& [name, value] : fields) {
      if (name == "token") tokens.push_back(value);
      if (name == "id") id_text = value;
    }
    bool good = !token.empty() && !tokens.empty();
    for (const std::string& t : tokens) good = good && same_secret(t, token);
    if (!good) {
      return line_response(403, tokens.empty() ? "a token is needed (the daemon's log prints it at "
                                                 "start: \"status page actions token\")"
                                               : "wrong token (the daemon's log prints the right "
                                                 "one at its start)");
    }
    Action action;
    action.name = request.path.substr(std::string("/api/").size());
    if (action.name == "retry") {
      char* end = nullptr;
      const long long id = std::strtoll(id_text.c_str(), &end, 10);
      if (id_text.empty() || *end != '\0' || id <= 0) {
        return line_response(400, "retry needs the file's number: id=N (got '" + id_text + "')");
      }
      action.id = id;
    }
    ActionResult result;
    try {
      result = actions(action);
    } catch (const std::exception& e) {
      result = {500, one_line(e.what())};
    }
    log::get("watch")->info("status page: {}{}: {}", action.name,
                            action.id ? " #" + std::to_string(action.id) : "", result.message);
    return line_response(result.status, result.message,
                         result.status == 303 ? "Location: /\r\n" : "");
  }

  std::string answer(const HttpRequest& request, bool peer_loopback) {
    const bool head = request.method == "HEAD";
    const bool action = request.path == "/api/retry" || request.path == "/api/pause" ||
                        request.path == "/api/resume";
    if (action) {
      if (request.method != "POST" || !actions) {
        return line_response(405, request.path + ": POST only", "Allow: POST\r\n");
      }
      return act(request, peer_loopback);
    }
    std::string type;
    std::function<std::string(const nlohmann::json&)> render;
    std::string extra;
    if (request.path == "/") {
      type = "text/html; charset=utf-8";
      // The token goes into the page's forms only for a browser on this host that named it by
      // its loopback address.
      const std::string shown =
          peer_loopback && local_host(request) && actions ? token : std::string();
      const size_t query = request.target.find('?');
      int refresh = 2;
      if (query != std::string::npos) {
        for (const auto& [name, value] :
             parse_form(std::string_view(request.target).substr(query + 1))) {
          if (name == "refresh") refresh = std::clamp(std::atoi(value.c_str()), 0, 3600);
        }
      }
      render = [shown, refresh](const nlohmann::json& s) { return status_html(s, shown, refresh); };
      extra = kPageHeaders;
    } else if (request.path == "/api/status") {
      type = "application/json";
      render = [](const nlohmann::json& s) { return status_json_text(s); };
    } else if (request.path == "/metrics") {
      type = "text/plain; version=0.0.4; charset=utf-8";
      render = status_metrics;
    } else {
      return response(404, "text/plain; charset=utf-8", "not found\n", head);
    }
    if (request.method != "GET" && !head) {
      return line_response(405, request.path + ": GET or HEAD only", "Allow: GET, HEAD\r\n");
    }
    try {
      return response(200, type, render(snapshot()), head, extra);
    } catch (const std::exception& e) {
      return response(500, "text/plain; charset=utf-8",
                      "status unavailable: " + one_line(e.what()) + "\n", head);
    }
  }

  void close_connection(std::list<Connection>::iterator it) {
    ::close(it->fd);
    connections.erase(it);
  }

  void start_answer(Connection& c, std::string text) {
    c.out = std::move(text);
    c.sent = 0;
    c.state = Connection::State::kWriting;
    c.deadline = after(kWriteSeconds);
    c.in.clear();
  }

  void accept_all() {
    for (int n = 0; n < kAcceptsPerTurn; ++n) {
      sockaddr_storage peer{};
      socklen_t peer_size = sizeof peer;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_size,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if ((errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
          // No descriptor left for it: accept it with the spare one and close it at once.
          ::close(spare_fd);
          const int shed = ::accept(listen_fd, nullptr, nullptr);
          if (shed >= 0) ::close(shed);
          spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;  // EAGAIN: none waiting; else tried again on the next turn
      }
      if (connections.size() >= cap) close_connection(connections.begin());
      Connection c;
      c.fd = fd;
      c.loopback = loopback(peer);
      c.deadline = after(kHeadSeconds);
      connections.push_back(std::move(c));
    }
  }

  // Returns false when the connection is done with (to be closed).
  bool on_ready(Connection& c, short events) {
    char buf[4096];
    switch (c.state) {
      case Connection::State::kReading: {
        const size_t want = c.need ? c.need : kMaxHead + 1;
        const ssize_t n = ::recv(c.fd, buf, std::min(want - c.in.size(), sizeof buf), 0);
        if (n == 0) return false;
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        c.in.append(buf, size_t(n));
        if (c.need) {  // the body of a POST
          if (c.in.size() < c.need) return true;
          c.request.body = c.in.substr(c.need - body_length(c.request));
          start_answer(c, answer(c.request, c.loopback));
          return write_some(c);
        }
        const size_t end = http_head_end(c.in, c.scanned);
        c.scanned = c.in.size();
        if (end == std::string::npos && c.in.size() <= kMaxHead) return true;
        HttpRequest request;
        size_t head_size = 0;
        switch (parse_http_request(c.in, kMaxHead, request, &head_size)) {
          case HttpParse::kIncomplete:
            return true;
          case HttpParse::kDone:
            if (request.method == "POST") {
              const auto lengths = header_values(request, "content-length");
              if (!header_values(request, "transfer-encoding").empty() || lengths.size() > 1) {
                start_answer(c, line_response(411, "a POST needs one Content-Length"));
                break;
              }
              const size_t length = body_length(request);
              if (length == std::string::npos) {
                start_answer(c, line_response(400, "bad Content-Length"));
                break;
              }
              if (length > kMaxBody) {
                start_answer(c, line_response(413, "a POST body is at most " +
                                                       std::to_string(kMaxBody) + " bytes"));
                break;
              }
              if (c.in.size() < head_size + length) {
                c.need = head_size + length;
                c.request = std::move(request);
                return true;
              }
              request.body = c.in.substr(head_size, length);
            }
            start_answer(c, answer(request, c.loopback));
            break;
          case HttpParse::kTooLarge:
            start_answer(
                c, response(431, "text/plain; charset=utf-8",
                            "request head larger than " + std::to_string(kMaxHead) + " bytes\n",
                            false));
            break;
          case HttpParse::kBad:
            start_answer(c, response(400, "text/plain; charset=utf-8", "bad request\n", false));
            break;
        }
        return write_some(c);
      }
      case Connection::State::kWriting:
        if (events & (POLLERR | POLLHUP)) return false;
        return write_some(c);
      case Connection::State::kLingering: {
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
      }
    }
    return false;
  }

  bool write_some(Connection& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.sent += size_t(n);
    }
    // All sent: no more from us; what the client still sends is read and dropped for a moment,
    // as closing with unread bytes would reset the connection and could lose the answer.
    ::shutdown(c.fd, SHUT_WR);
    c.out.clear();
    c.state = Connection::State::kLingering;
    c.deadline = after(kLingerSeconds);
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    while (!stop.load()) {
      fds.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      auto next = after(1.0);
      for (const Connection& c : connections) {
        fds.push_back({c.fd, short(c.state == Connection::State::kWriting ? POLLOUT : POLLIN), 0});
        next = std::min(next, c.deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
      const int rc = ::poll(fds.data(), fds.size(), int(std::max<int64_t>(wait.count(), 0) + 1));
      if (rc < 0 && errno != EINTR) {
        log::get("watch")->error("status page: poll failed: {}", std::strerror(errno));
        return;
      }
      if (stop.load()) return;
      // The connections polled, in the order they were polled (accepting appends at the end).
      size_t i = 2;
      const auto now = Clock::now();
      for (auto it = connections.begin(); it != connections.end() && i < fds.size(); ++i) {
        const short events = fds[i].revents;
        const bool keep = events ? on_ready(*it, events) : true;
        if (!keep || now >= it->deadline) {
          close_connection(it++);
        } else {
          ++it;
        }
      }
      if (fds[1].revents & POLLIN) accept_all();
    }
  }
};

StatusServer::StatusServer(const std::string& host, int port,
                           std::function<nlohmann::json()> snapshot, std::string token,
                           std::function<ActionResult(const Action&)> actions)
    : impl_(std::make_unique<Impl>()) {
  impl_->snapshot = std::move(snapshot);
  impl_->token = std::move(token);
  impl_->actions = std::move(actions);
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0) {
    throw Error("status page: cannot listen on " + where + ": " + ::gai_strerror(gai),
                kExitCantCreat);
  }
  int err = EADDRNOTAVAIL;
  for (const addrinfo* a = found; a && impl_->listen_fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      impl_->listen_fd = fd;
      break;
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (impl_->listen_fd < 0) {
    throw Error("status page: cannot listen on " + where + " (" + std::strerror(err) + ")",
                kExitCantCreat);
  }
  sockaddr_storage bound{};
  socklen_t size = sizeof bound;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &size);
  port_ = bound.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
              : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  impl_->port = port_;
  if (::pipe2(impl_->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw Error("status page: cannot make a pipe: " + std::string(std::strerror(errno)),
                kExitCantCreat);
  }
  impl_->spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  impl_->cap = max_connections_ = connection_cap();
  thread_ = std::thread([this] { impl_->run(); });
  log::get("watch")->info("status page on http://{}:{}/",
                          host.find(':') != std::string::npos ? "[" + host + "]" : host, port_);
}

StatusServer::~StatusServer() {
  impl_->stop.store(true);
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake[1], &c, 1);
  if (thread_.joinable()) thread_.join();
}

}  // namespace wm::watch
