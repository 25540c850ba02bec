#include "watch/status_server.h"

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
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

std::string response(int status, const std::string& type, const std::string& body, bool head,
                     const char* extra = "") {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                    "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n" + extra +
                    "Connection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

struct Connection {
  enum class State { kReading, kWriting, kLingering };
  int fd = -1;
  State state = State::kReading;
  std::string in;
  size_t scanned = 0;  // bytes of `in` known to hold no end of the head
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
};

}  // namespace

struct StatusServer::Impl {
  std::function<nlohmann::json()> snapshot;
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

  std::string answer(const HttpRequest& request) {
    const bool head = request.method == "HEAD";
    if (request.method != "GET" && !head) {
      return response(405, "text/plain; charset=utf-8", "GET or HEAD only\n", false,
                      "Allow: GET, HEAD\r\n");
    }
    std::string type;
    std::function<std::string(const nlohmann::json&)> render;
    if (request.path == "/") {
      type = "text/html; charset=utf-8";
      render = status_html;
    } else if (request.path == "/api/status") {
      type = "application/json";
      render = [](const nlohmann::json& s) { return status_json_text(s); };
    } else if (request.path == "/metrics") {
      type = "text/plain; version=0.0.4; charset=utf-8";
      render = status_metrics;
    } else {
      return response(404, "text/plain; charset=utf-8", "not found\n", head);
    }
    try {
      return response(200, type, render(snapshot()), head);
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
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
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
      c.deadline = after(kHeadSeconds);
      connections.push_back(std::move(c));
    }
  }

  // Returns false when the connection is done with (to be closed).
  bool on_ready(Connection& c, short events) {
    char buf[4096];
    switch (c.state) {
      case Connection::State::kReading: {
        const size_t room = kMaxHead + 1 - c.in.size();
        const ssize_t n = ::recv(c.fd, buf, std::min(room, sizeof buf), 0);
        if (n == 0) return false;
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        c.in.append(buf, size_t(n));
        const size_t end = http_head_end(c.in, c.scanned);
        c.scanned = c.in.size();
        if (end == std::string::npos && c.in.size() <= kMaxHead) return true;
        HttpRequest request;
        switch (parse_http_request(c.in, kMaxHead, request)) {
          case HttpParse::kIncomplete:
            return true;
          case HttpParse::kDone:
            start_answer(c, answer(request));
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
                           std::function<nlohmann::json()> snapshot)
    : impl_(std::make_unique<Impl>()) {
  impl_->snapshot = std::move(snapshot);
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
