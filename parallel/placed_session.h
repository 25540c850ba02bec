// Sessions that run their calls on device workers of their own: the pipeline (or any caller)
// calls run() from whichever thread it has and only waits. WorkerSession puts one session on
// one worker (a data-parallel rank: the k-th rank of a job may be lane k of the CPU, or GPU k);
// SequenceParallelSession (sequence_parallel.h) runs one over several ranks. Torch-free header.
#pragma once

#include <memory>

#include "parallel/device_worker.h"
#include "src/model.h"

namespace wm::parallel {

class Fault;

// The mark of a session that places its own calls (run() may be called from any thread).
class PlacedSession : public ModelSession {};

class WorkerSession final : public PlacedSession {
 public:
  // `session` runs on `worker` (not owned; outlives the session) as the job's rank `rank`;
  // `fault` (may be null; outlives the session): the job's test-only fault injection.
  // `name_rank`: errors say "rank R (device), slice S: " (a job of several ranks).
  WorkerSession(std::unique_ptr<ModelSession> session, DeviceWorker& worker, int rank,
                Fault* fault = nullptr, bool name_rank = true);
  // Runs the slice on the worker with ctx.device set to it. A failure is rethrown as one line
  // naming the rank, its device and the slice (rank_fault.h), a wm::Error unchanged.
  Planar run(Planar&& input, const RunContext& ctx) override;
  // The wrapped session's, run on the worker (its device, stream and thread).
  bool export_state(std::vector<StateTensor>& out) const override;
  bool import_state(const std::vector<StateTensor>& in) override;

  DeviceWorker& worker() const { return worker_; }
  int rank() const { return rank_; }

 private:
  std::unique_ptr<ModelSession> session_;
  DeviceWorker& worker_;
  int rank_;
  Fault* fault_;
  bool name_rank_;
};

}  // namespace wm::parallel
