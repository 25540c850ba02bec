#include "parallel/halo_nccl.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "src/base/error.h"

#ifdef WMBATCH_WITH_NCCL
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include "src/exec/halo_exchange.h"
#endif

namespace wm::parallel {

#ifndef WMBATCH_WITH_NCCL

bool nccl_available() { return false; }

std::unique_ptr<ExchangeGroup> nccl_group(const std::vector<int>&) {
  throw Error("this build has no NCCL (configure with -DWMBATCH_WITH_NCCL=ON)", kExitDataErr);
}

#else

bool nccl_available() { return true; }

namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw Error(std::string("NCCL ") + what + ": " + ncclGetErrorString(r), kExitFailure);
  }
}

// The process's communicators per device set, made once and kept (until an abort).
struct Communicators {
  std::vector<ncclComm_t> comms;
  bool aborted = false;
};

std::mutex g_mutex;
std::map<std::vector<int>, std::shared_ptr<Communicators> >& registry() {
  static auto* r = new std::map<std::vector<int>, std::shared_ptr<Communicators> >();
  return *r;
}

std::shared_ptr<Communicators> communicators(const std::vector<int>& devices) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::shared_ptr<Communicators>& c = registry()[devices];
  if (!c || c->aborted) {
    c = std::make_shared<Communicators>();
    c->comms.resize(devices.size());
    check(ncclCommInitAll(c->comms.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
  }
  return c;
}

class NcclGroup final : public ExchangeGroup {
 public:
  explicit NcclGroup(std::vector<int> devices) : devices_(std::move(devices)) {
    for (size_t r = 0; r < devices_.size(); ++r)
      ranks_.push_back(std::make_unique<Rank>(*this, int(r)));
  }
  int size() const override { return int(devices_.size()); }
  void begin(int active) override {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = std::min(active, size());
    failure_.clear();
    comms_ = communicators(devices_);
  }
  exec::HaloExchange& rank(int r) override { return *ranks_.at(size_t(r)); }
  void abort(const std::string& why) override {
    std::shared_ptr<Communicators> c;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty()) failure_ = why;
      c = comms_;
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    if (c && !c->aborted) {
      c->aborted = true;
      for (ncclComm_t comm : c->comms) ncclCommAbort(comm);
    }
  }
  bool failed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return !failure_.empty();
  }
  ExchangeStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

 private:
  class Rank final : public exec::HaloExchange {
   public:
    Rank(NcclGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override { return group_.active_; }
    void send(int to, const at::Tensor& t) override {
      ncclComm_t comm = group_.comm(rank_, to);
      const at::Tensor data = t.is_non_overlapping_and_dense() ? t : t.contiguous();
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(data.device().index());
      check(ncclSend(data.data_ptr(), size_t(data.nbytes()), ncclUint8, to, comm, stream.stream()),
            "ncclSend");
      data.record_stream(stream);  // kept until the send has run
      group_.count(int64_t(data.nbytes()));
    }
    void recv(int from, at::Tensor& into) override {
      ncclComm_t comm = group_.comm(rank_, from);
      if (!into.is_non_overlapping_and_dense()) {
        throw Error("NCCL recv: the destination is not dense", kExitSoftware);
      }
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(into.device().index());
      check(
          ncclRecv(into.data_ptr(), size_t(into.nbytes()), ncclUint8, from, comm, stream.stream()),
          "ncclRecv");
    }

   private:
    NcclGroup& group_;
    int rank_;
  };

  ncclComm_t comm(int rank, int peer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty()) {
      throw Error("halo exchange (rank " + std::to_string(rank) + "): " + failure_, kExitFailure);
    }
    if (peer < 0 || peer >= active_ || peer == rank) {
      throw Error("halo exchange: no link from rank " + std::to_string(rank) + " to rank " +
                      std::to_string(peer),
                  kExitFailure);
    }
    return comms_->comms[size_t(rank)];
  }
  void count(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.messages += 1;
    stats_.bytes += bytes;
  }

  std::vector<int> devices_;
  std::vector<std::unique_ptr<Rank> > ranks_;
  mutable std::mutex mutex_;
  int active_ = 0;
  std::string failure_;
  std::shared_ptr<Communicators> comms_;
  ExchangeStats stats_;
};

}  // namespace

std::unique_ptr<ExchangeGroup> nccl_group(const std::vector<int>& devices) {
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    throw Error("NCCL halo exchange: one rank per GPU (a device repeats)", kExitDataErr);
  }
  return std::make_unique<NcclGroup>(devices);
}

#endif

}  // namespace wm::parallel
