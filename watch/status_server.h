// The read-only HTTP status page (cpp-httplib): "/" the HTML page, "/api/status" the JSON
// snapshot, "/metrics" Prometheus text. GET only; it serves the snapshot, never files.
//
// Threading: the server runs on threads of its own; `snapshot` is called from them and must be
// thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace wm::watch {

class StatusServer {
 public:
  // Binds host:port (port 0: any free port) and starts serving. Throws wm::Error
  // (kExitCantCreat) when the address cannot be bound.
  StatusServer(const std::string& host, int port, std::function<nlohmann::json()> snapshot);
  ~StatusServer();  // stops serving
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace wm::watch
