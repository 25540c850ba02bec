#include "parallel/rank_run.h"
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include "parallel/device_worker.h"
#include "parallel/exchange_group.h"
#include "parallel/torch_side.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"

namespace wm::parallel {

InProcessRanks::InProcessRanks(std::vector<Device> devices, int ranks, int first_lane,
                               std::chrono::milliseconds timeout)
    : devices_(std::move(devices)),
      ranks_(ranks),
      first_lane_(first_lane),
      group_(torch_devices().inprocess_group(ranks, timeout)) {
  if (devices_.empty() || ranks < 1)
    throw Error("InProcessRanks: no devices or ranks", kExitSoftware);
}

InProcessRanks::~InProcessRanks() = default;

std::vector<Planar> InProcessRanks::run(bool exchange,
                                        const std::function<Planar(int, RunContext&)>& body) {
  const int n = ranks_;
  const int per = int(devices_.size());
  group_->begin(n);
  std::vector<Planar> out(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::mutex mutex;
  int first = -1;  // the rank that failed first (the others' errors follow from its abort)
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      DeviceWorker& worker = device_worker(devices_[size_t(r % per)], first_lane_ + r / per);
      exec::SliceExchange view(group_->rank(r), r, n, r > 0 ? r - 1 : -1, r + 1 < n ? r + 1 : -1);
      try {
        out[size_t(r)] = worker.call([&] {
          RunContext ctx;
          ctx.device = worker.context();
          if (exchange) ctx.halo = &view;
          return body(r, ctx);
        });
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          errors[size_t(r)] = e.what();
          if (first < 0) first = r;
        }
        group_->abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first >= 0) {
    throw ModelError("rank " + std::to_string(first) + ": " + errors[size_t(first)]);
  }
  return out;
}

}  // namespace wm::parallel
