// Ranks of one process run at once, each on a device worker of its own, with an in-process
// exchange group between them: what a benchmark needs to run one model call split over ranks (or
// one call per rank) without a session. Torch-free header.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <vector>
#include "src/model.h"

namespace wm::parallel {

class ExchangeGroup;

class InProcessRanks {
 public:
  // `ranks` ranks; rank r on devices[r % devices.size()], device worker lane
  // first_lane + r / devices.size() (lane 0 is what a single-device run uses).
  InProcessRanks(std::vector<Device> devices, int ranks, int first_lane,
                 std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~InProcessRanks();
  int size() const { return ranks_; }
  // Runs body(rank, ctx) on every rank at once on its worker; ctx.device is the worker's and,
  // when `exchange`, ctx.halo is the rank's view of the group with neighbours r - 1 and r + 1.
  // Returns the ranks' results in rank order. A rank's failure aborts the others and is thrown
  // as ModelError "rank R: ..." (the rank that failed first: the others fail from its abort).
  std::vector<Planar> run(bool exchange, const std::function<Planar(int, RunContext&)>& body);

 private:
  std::vector<Device> devices_;
  int ranks_;
  int first_lane_;
  std::unique_ptr<ExchangeGroup> group_;
};

}  // namespace wm::parallel
