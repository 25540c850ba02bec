#include "parallel/placed_session.h"

#include <chrono>
#include <exception>
#include <utility>

#include "parallel/rank_fault.h"

namespace wm::parallel {

WorkerSession::WorkerSession(std::unique_ptr<ModelSession> session, DeviceWorker& worker, int rank,
                             Fault* fault, bool name_rank)
    : session_(std::move(session)),
      worker_(worker),
      rank_(rank),
      fault_(fault),
      name_rank_(name_rank) {}

Planar WorkerSession::run(Planar&& input, const RunContext& ctx) {
  RunContext rc = ctx;
  rc.device = worker_.context();
  try {
    return worker_.call([&] {
      if (fault_ && fault_->fires(rank_, ctx.slice_index)) {
        // No exchange to abort: a hang lasts a minute (tests use oom or error here).
        fault_->raise(rank_, ctx.slice_index, nullptr, std::chrono::minutes(1));
      }
      Planar out = session_->run(std::move(input), rc);
      // Output frames made here, once per slice (tile 0); a deferred output (the session
      // returned before its last copies) counts when it is taken.
      if (ctx.tile_index == 0) {
        if (ctx.deferred && *ctx.deferred) {
          *ctx.deferred = [take = std::move(*ctx.deferred), worker = &worker_] {
            Planar taken = take();
            worker->add_frames(taken.frames);
            return taken;
          };
        } else {
          worker_.add_frames(out.frames);
        }
      }
      return out;
    });
  } catch (...) {
    rethrow_rank_failure(std::current_exception(), rank_, worker_.device(), ctx.slice_index,
                         name_rank_);
  }
}

bool WorkerSession::export_state(std::vector<StateTensor>& out) const {
  return worker_.call([&] { return session_->export_state(out); });
}

bool WorkerSession::import_state(const std::vector<StateTensor>& in) {
  return worker_.call([&] { return session_->import_state(in); });
}

}  // namespace wm::parallel
