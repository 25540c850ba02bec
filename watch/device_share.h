// Which GPUs a watch worker runs its files on (watch/worker.h): max_parallel files at once are
// spread over the job's GPUs. Pure, header-only (unit-tested without a GPU).
#pragma once

#include <cstddef>
#include <vector>

namespace wm::watch {

// The GPUs of worker `worker` (0-based) of `workers`, from the job's GPU `ids`: every GPU goes
// to exactly one worker, round robin (worker k gets ids[k], ids[k + workers], ...), so no GPU
// sits idle while files wait; with more workers than GPUs, each worker gets one GPU and the GPUs
// are shared round robin (worker k: ids[k % size]). Empty `ids` (CPU jobs): empty.
inline std::vector<int> worker_devices(const std::vector<int>& ids, int worker, int workers) {
  std::vector<int> out;
  if (ids.empty() || workers <= 0 || worker < 0) return out;
  if (size_t(workers) >= ids.size()) {
    out.push_back(ids[size_t(worker) % ids.size()]);
    return out;
  }
  for (size_t i = size_t(worker); i < ids.size(); i += size_t(workers)) out.push_back(ids[i]);
  return out;
}

}  // namespace wm::watch
