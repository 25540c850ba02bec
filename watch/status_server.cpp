#include "watch/status_server.h"

#include "src/base/error.h"
#include "src/base/log.h"
#include "watch/status.h"

#ifdef WMBATCH_WITH_HTTPLIB
#include <httplib.h>

namespace wm::watch {

StatusServer::StatusServer(const std::string& host, int port,
                           std::function<nlohmann::json()> snapshot)
    : server_(std::make_unique<httplib::Server>()) {
  auto serve = [snapshot](auto render, const char* type) {
    return [snapshot, render, type](const httplib::Request&, httplib::Response& res) {
      try {
        res.set_content(render(snapshot()), type);
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(std::string("status unavailable: ") + e.what() + "\n", "text/plain");
      }
      res.set_header("Cache-Control", "no-store");
      res.set_header("X-Content-Type-Options", "nosniff");
    };
  };
  server_->Get("/", serve([](const nlohmann::json& s) { return status_html(s); },
                          "text/html; charset=utf-8"));
  server_->Get("/api/status",
               serve([](const nlohmann::json& s) { return s.dump(2) + "\n"; }, "application/json"));
  server_->Get("/metrics", serve([](const nlohmann::json& s) { return status_metrics(s); },
                                 "text/plain; version=0.0.4; charset=utf-8"));
  server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  port_ =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ < 0) {
    throw Error("status page: cannot listen on " + host + ":" + std::to_string(port) +
                    " (address in use or not available)",
                kExitCantCreat);
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  log::get("watch")->info("status page on http://{}:{}/", host, port_);
}

StatusServer::~StatusServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace wm::watch

#else  // built without cpp-httplib: no status page

namespace httplib {
class Server {};
}  // namespace httplib

namespace wm::watch {

StatusServer::StatusServer(const std::string& host, int port,
                           std::function<nlohmann::json()> snapshot) {
  throw Error(
      "http: this wmbatch was built without cpp-httplib (libcpp-httplib-dev), so it has "
      "no status page; remove `http:` or rebuild with it",
      kExitCantCreat);
}

StatusServer::~StatusServer() = default;

}  // namespace wm::watch

#endif
