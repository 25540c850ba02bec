#include "parallel/halo_nccl.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "src/base/error.h"
#include "src/base/log_text.h"

#ifdef WMBATCH_WITH_NCCL
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "parallel/halo_inprocess.h"
#include "parallel/value_mailbox.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#endif

namespace wm::parallel {

#ifndef WMBATCH_WITH_NCCL

std::unique_ptr<ExchangeGroup> nccl_group(const std::vector<int>&, std::chrono::milliseconds) {
  throw Error("this build has no NCCL (configure with -DWMBATCH_WITH_NCCL=ON)", kExitDataErr);
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// Whether this process's CUDA loads kernels lazily (cuModuleGetLoadingMode, through the
// runtime's driver entry points: no link to the driver library); without that query, what the
// environment asked for (lazy unless EAGER: CUDA's default since 12.2).
bool lazy_module_loading() {
#if CUDART_VERSION >= 12050
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  int mode = 0;  // CUmoduleLoadingMode: 1 eager, 2 lazy
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault,
                                       &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess && fn &&
      reinterpret_cast<int (*)(int*)>(fn)(&mode) == 0) {
    return mode == 2;
  }
#endif
  const char* asked = std::getenv("CUDA_MODULE_LOADING");
  return !(asked && std::string(asked) == "EAGER");
}

// NCCL's own words for a result, with its last error's first line when it has one.
std::string nccl_text(ncclResult_t r) {
  std::string text = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(nullptr); last && *last) {
    std::string line = last;
    line = line.substr(0, line.find('\n'));
    text += " (" + line + ")";
  }
#endif
  return text;
}

// The process's communicators for one device set. Non-blocking (config.blocking = 0): no host
// thread ever waits inside NCCL; after a call returns ncclInProgress its caller polls
// ncclCommGetAsyncError, watching the abort flag and the deadline, so an abort or a timeout
// always frees it. NCCL calls hold `use` shared and the abort holds it exclusive, so no call
// runs on an aborted (freed) communicator.
struct Communicators {
  std::vector<ncclComm_t> comms;
  std::shared_mutex use;
  bool aborted = false;  // written under `use` held exclusive
};

void abort_all(Communicators& c) {
  std::unique_lock<std::shared_mutex> lock(c.use);
  if (c.aborted) return;
  c.aborted = true;
  for (ncclComm_t comm : c.comms) {
    if (comm) ncclCommAbort(comm);  // device work waiting on a peer ends
  }
}

// Polls `comm` until its last operation is enqueued (or the communicator ready): true on success;
// false with `error` set on an NCCL error, an abort or the deadline.
bool settle(Communicators& c, size_t rank, Clock::time_point deadline, std::string& error) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    {
      std::shared_lock<std::shared_mutex> lock(c.use);
      if (c.aborted) {
        error = "the communicator was aborted";
        return false;
      }
      const ncclResult_t r = ncclCommGetAsyncError(c.comms[rank], &state);
      if (r != ncclSuccess) state = r;
    }
    if (state == ncclSuccess) return true;
    if (state != ncclInProgress) {
      error = nccl_text(state);
      return false;
    }
    if (Clock::now() >= deadline) {
      error = "timed out";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// One communicator per device of `devices` (rank r on devices[r]), made in one group call.
std::shared_ptr<Communicators> make_communicators(const std::vector<int>& devices,
                                                  std::chrono::milliseconds timeout) {
  auto c = std::make_shared<Communicators>();
  const int n = int(devices.size());
  c->comms.assign(size_t(n), nullptr);
  auto fail = [&](const std::string& what, const std::string& why) {
    abort_all(*c);
    throw Error(
        "NCCL " + what + " for GPUs " +
            [&] {
              std::string list;
              for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
              return list;
            }() +
            ": " + why,
        kExitFailure);
  };
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) fail("ncclGetUniqueId", nccl_text(r));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclGroupStart();
  if (r != ncclSuccess) fail("ncclGroupStart", nccl_text(r));
  for (int rank = 0; rank < n; ++rank) {
    const c10::cuda::CUDAGuard guard(c10::DeviceIndex(devices[size_t(rank)]));
    r = ncclCommInitRankConfig(&c->comms[size_t(rank)], n, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclGroupEnd();
      fail("ncclCommInitRankConfig", nccl_text(r));
    }
  }
  r = ncclGroupEnd();
  if (r != ncclSuccess && r != ncclInProgress) fail("ncclGroupEnd", nccl_text(r));
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t rank = 0; rank < size_t(n); ++rank) {
    std::string why;
    if (!settle(*c, rank, deadline, why)) fail("communicator setup", why);
  }
  return c;
}

// NCCL connects two ranks on their first message between them (runtime connect), a handshake
// both take part in. Made on first use in the middle of a run, while a neighbour's receive
// kernel already waits on the GPU, the connection never completed on two and four H200s: the
// rank polled an operation "in progress" until its deadline (issue 30's runs). So a new
// communicator connects every pair of neighbours (r and r + 1, both ways; the last and the first
// too) at once: one byte each way, every rank's send and receive in one group call from this
// thread while none of its kernels runs, then waits until they landed. Throws (after aborting
// the communicators) on an NCCL error or the timeout.
void connect_neighbours(Communicators& c, const std::vector<int>& devices,
                        std::chrono::milliseconds timeout) {
  const int n = int(devices.size());
  if (n < 2) return;
  std::vector<c10::cuda::CUDAStream> streams;
  std::vector<at::Tensor> bytes;  // per rank: [0] sent, [1] from the rank before, [2] after
  for (int d : devices) {
    streams.push_back(c10::cuda::getStreamFromPool(false, c10::DeviceIndex(d)));
    bytes.push_back(at::zeros({3}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA, d)));
    at::cuda::CUDAEvent ready;  // the zeros are written before the sends read them
    ready.record(c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(d)));
    ready.block(streams.back());
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string error;
  bool ok = false;
  {
    std::shared_lock<std::shared_mutex> use(c.use);
    ncclResult_t r = ncclGroupStart();
    auto keep = [&r](ncclResult_t next) {
      if (r == ncclSuccess || r == ncclInProgress) r = next;
    };
    for (int rank = 0; rank < n && (r == ncclSuccess || r == ncclInProgress); ++rank) {
      const int before = (rank + n - 1) % n, after = (rank + 1) % n;
      uint8_t* p = static_cast<uint8_t*>(bytes[size_t(rank)].data_ptr());
      cudaStream_t s = streams[size_t(rank)].stream();
      ncclComm_t comm = c.comms[size_t(rank)];
      keep(ncclSend(p, 1, ncclUint8, after, comm, s));
      keep(ncclRecv(p + 1, 1, ncclUint8, before, comm, s));
      if (before != after) {  // more than two ranks: the other direction too
        keep(ncclSend(p, 1, ncclUint8, before, comm, s));
        keep(ncclRecv(p + 2, 1, ncclUint8, after, comm, s));
      }
    }
    keep(ncclGroupEnd());
    ok = r == ncclSuccess || r == ncclInProgress;
    if (!ok) error = nccl_text(r);
  }
  for (size_t rank = 0; ok && rank < size_t(n); ++rank) ok = settle(c, rank, deadline, error);
  for (size_t rank = 0; ok && rank < size_t(n); ++rank) {
    while (ok && !streams[rank].query()) {
      if (Clock::now() >= deadline) {
        ok = false;
        error = "timed out";
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (!ok) {
    abort_all(c);
    std::string list;
    for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    throw Error("NCCL connecting GPUs " + list + ": " + error, kExitFailure);
  }
}

std::mutex g_mutex;
std::map<std::vector<int>, std::shared_ptr<Communicators> >& registry() {
  static auto* r = new std::map<std::vector<int>, std::shared_ptr<Communicators> >();
  return *r;
}

// The set's communicators: made on first use and after an abort, else the kept ones. `pair`:
// the two-rank communicators of one direction between two GPUs (devices = {from, to}), apart
// from those of the same two GPUs as a group.
std::shared_ptr<Communicators> communicators(const std::vector<int>& devices,
                                             std::chrono::milliseconds timeout, bool pair = false) {
  std::vector<int> key = devices;
  if (pair) key.insert(key.begin(), -1);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::shared_ptr<Communicators>& c = registry()[key];
  bool usable = false;
  if (c) {
    std::shared_lock<std::shared_mutex> use(c->use);
    usable = !c->aborted;
  }
  if (!usable) {
    c = make_communicators(devices, timeout);
    connect_neighbours(*c, devices, timeout);
  }
  return c;
}

class NcclGroup final : public ExchangeGroup {
 public:
  NcclGroup(std::vector<int> devices, std::chrono::milliseconds timeout)
      : devices_(std::move(devices)), timeout_(timeout) {
    for (size_t r = 0; r < devices_.size(); ++r) {
      ranks_.push_back(std::make_unique<Rank>(*this, int(r)));
      pipes_.push_back(std::make_unique<Pipe>(*this, int(r)));
    }
    stats_.ranks.resize(devices_.size());
    // No cuDNN search while ranks wait on the devices (exec::DeviceSettings).
    exec::DeviceSettings settings;
    settings.peers_wait_on_device = true;
    exec::device_layer().ask(settings);
  }
  int size() const override { return int(devices_.size()); }
  void begin(int active) override {
    std::shared_ptr<Communicators> comms = communicators(devices_, timeout_);
    int ranks = 0;
    values_.clear();  // (their locks are never taken inside mutex_)
    handoffs_.begin(active);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      active_ = ranks = std::min(active, size());
      failure_.clear();
      ledger_.clear();
      comms_ = std::move(comms);
      // Pairs aborted with the last run's failure are made again below.
      for (auto it = links_.begin(); it != links_.end();) {
        std::shared_lock<std::shared_mutex> use(it->second->comms->use);
        it = it->second->comms->aborted ? links_.erase(it) : std::next(it);
      }
      deadline_ = Clock::now() + timeout_;
    }
    // The ring's pair communicators (rank r to r + 1: the time split's pipelined messages; the
    // last rank's hand-off to rank 0 goes through memory, Pipe), now, while none of this group's
    // NCCL operations is in flight: made on first use mid-run, a communicator's setup (device
    // memory, stream syncs on both GPUs) can wait behind a neighbour's receive kernel that waits
    // for this very rank, and the run hangs until its deadline (seen on two H200s: the SeedVR2
    // and Wan2.1 NCCL runs of issue 30). Other pairs are still made on first use.
    for (int r = 0; r + 1 < ranks; ++r) link(r, r + 1);
  }
  exec::HaloExchange& rank(int r) override { return *ranks_.at(size_t(r)); }
  exec::HaloExchange& pipelined(int r) override { return *pipes_.at(size_t(r)); }
  void abort(const std::string& why) override {
    std::vector<std::shared_ptr<Communicators> > all;
    std::string unmatched;
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failure_.empty()) {
        failure_ = why;
        unmatched = unmatched_locked();
        first = true;
      }
      all.push_back(comms_);
      for (const auto& [edge, link] : links_) all.push_back(link->comms);
    }
    values_.wake();
    handoffs_.abort(why);
    if (first) log::warn("nccl", "the run failed: " + why);
    // What the ranks had queued when the run failed, where the two ends differ: an NCCL send
    // waits on the device for its receive, so a message one rank queues and its peer never does
    // (or one of another size) hangs both — the first thing to read in a hang.
    if (!unmatched.empty())
      log::warn("nccl", "queued and not matched when the run failed: " + unmatched);
    for (const auto& c : all) {
      if (c) abort_all(*c);
    }
  }
  bool failed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return !failure_.empty();
  }
  std::string health() override {
    std::vector<std::pair<std::shared_ptr<Communicators>, std::vector<int> > > all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all.emplace_back(comms_, devices_);
      for (const auto& [edge, link] : links_) {
        all.emplace_back(link->comms, std::vector<int>{devices_[size_t(edge.first)],
                                                       devices_[size_t(edge.second)]});
      }
    }
    for (const auto& [c, devices] : all) {
      if (!c) continue;
      std::shared_lock<std::shared_mutex> use(c->use);
      if (c->aborted) continue;
      for (size_t r = 0; r < c->comms.size(); ++r) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(c->comms[r], &state) != ncclSuccess) continue;
        if (state != ncclSuccess && state != ncclInProgress) {
          return "NCCL error on cuda:" + std::to_string(devices[r]) + ": " + nccl_text(state);
        }
      }
    }
    return {};
  }
  ExchangeStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  const char* kind() const override { return "nccl"; }

 private:
  // One direction between two ranks for pipelined messages: a two-rank communicator (the
  // sender rank 0, the receiver rank 1) of its own, so a rank's sends and receives never
  // queue behind each other inside NCCL, and a stream on the sender's GPU for the sends, so a
  // send waiting for a receiver a layer or a slice behind holds neither the sender's compute
  // nor its other messages.
  struct Link {
    std::shared_ptr<Communicators> comms;
    std::optional<c10::cuda::CUDAStream> sends;
  };
  std::shared_ptr<Link> link(int from, int to) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = links_.find({from, to});
      if (it != links_.end()) return it->second;
    }
    auto made = std::make_shared<Link>();
    made->comms = communicators({devices_[size_t(from)], devices_[size_t(to)]}, timeout_, true);
    made->sends = c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                               c10::DeviceIndex(devices_[size_t(from)]));
    std::lock_guard<std::mutex> lock(mutex_);
    return links_.emplace(std::make_pair(from, to), std::move(made)).first->second;
  }

  // Rank r's pipelined view: sends on the link's stream (after the work queued so far on the
  // sender's current stream), receives on the current stream (later work waits for them).
  // Messages back in rank order (the time split's ring: the last rank's histories for rank 0's
  // next slice) go through the process's memory instead (an in-process group's, handoffs_):
  // an NCCL send runs until
  // its receive does, and a caller that takes each slice before giving the next never starts
  // that receive while the last rank's slice still runs; with the send kernels waiting on its
  // GPU the last rank's own slice never finished (seen on two H200s: the two-GPU NCCL test hung
  // with 32 such sends queued and rank 0 done).
  class Pipe final : public exec::HaloExchange {
   public:
    Pipe(NcclGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override {
      std::lock_guard<std::mutex> lock(group_.mutex_);
      return group_.active_;
    }
    void send(int to, const at::Tensor& t) override {
      group_.check(rank_, to);
      if (to < rank_) return group_.handoff_send(rank_, to, t);
      const at::Tensor data = t.is_non_overlapping_and_dense() ? t : t.contiguous();
      const std::shared_ptr<Link> link = group_.link(rank_, to);
      const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(data.device().index());
      at::cuda::CUDAEvent ready;
      ready.record(current);
      ready.block(*link->sends);
      group_.call(*link->comms, 0, rank_, to, "ncclSend", [&](ncclComm_t comm) {
        return ncclSend(data.data_ptr(), size_t(data.nbytes()), ncclUint8, 1, comm,
                        link->sends->stream());
      });
      data.record_stream(*link->sends);  // kept until the send has run
      group_.count(rank_, int64_t(data.nbytes()));
      group_.note(1, rank_, to, true, int64_t(data.nbytes()));
    }
    void recv(int from, at::Tensor& into) override {
      group_.check(rank_, from);
      if (from > rank_) return group_.handoff_recv(from, rank_, into);
      if (!into.is_non_overlapping_and_dense()) {
        throw Error("NCCL recv: the destination is not dense", kExitSoftware);
      }
      const std::shared_ptr<Link> link = group_.link(from, rank_);
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(into.device().index());
      group_.call(*link->comms, 1, rank_, from, "ncclRecv", [&](ncclComm_t comm) {
        return ncclRecv(into.data_ptr(), size_t(into.nbytes()), ncclUint8, 0, comm,
                        stream.stream());
      });
      group_.note(1, from, rank_, false, int64_t(into.nbytes()));
    }
    void send_values(int to, const std::vector<int64_t>& values) override {
      group_.send_values(rank_, to, values);
    }
    std::vector<int64_t> recv_values(int from) override { return group_.recv_values(from, rank_); }

   private:
    NcclGroup& group_;
    int rank_;
  };

  class Rank final : public exec::HaloExchange {
   public:
    Rank(NcclGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override {
      std::lock_guard<std::mutex> lock(group_.mutex_);
      return group_.active_;
    }
    void send(int to, const at::Tensor& t) override {
      group_.check(rank_, to);
      const at::Tensor data = t.is_non_overlapping_and_dense() ? t : t.contiguous();
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(data.device().index());
      group_.call(*group_.main(), size_t(rank_), rank_, to, "ncclSend", [&](ncclComm_t comm) {
        return ncclSend(data.data_ptr(), size_t(data.nbytes()), ncclUint8, to, comm,
                        stream.stream());
      });
      data.record_stream(stream);  // kept until the send has run
      group_.count(rank_, int64_t(data.nbytes()));
      group_.note(0, rank_, to, true, int64_t(data.nbytes()));
    }
    void recv(int from, at::Tensor& into) override {
      group_.check(rank_, from);
      if (!into.is_non_overlapping_and_dense()) {
        throw Error("NCCL recv: the destination is not dense", kExitSoftware);
      }
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(into.device().index());
      group_.call(*group_.main(), size_t(rank_), rank_, from, "ncclRecv", [&](ncclComm_t comm) {
        return ncclRecv(into.data_ptr(), size_t(into.nbytes()), ncclUint8, from, comm,
                        stream.stream());
      });
      group_.note(0, from, rank_, false, int64_t(into.nbytes()));
    }
    void send_values(int to, const std::vector<int64_t>& values) override {
      group_.send_values(rank_, to, values);
    }
    std::vector<int64_t> recv_values(int from) override { return group_.recv_values(from, rank_); }

   private:
    NcclGroup& group_;
    int rank_;
  };

  // Throws when the run failed or `peer` is no peer of `rank`.
  void check(int rank, int peer) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty()) {
      throw Error("halo exchange (rank " + std::to_string(rank) + "): " + failure_, kExitFailure);
    }
    if (peer < 0 || peer >= active_ || peer == rank) {
      throw Error("halo exchange: no link from rank " + std::to_string(rank) + " to rank " +
                      std::to_string(peer),
                  kExitFailure);
    }
  }
  std::shared_ptr<Communicators> main() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return comms_;
  }
  // Issues one NCCL operation of `rank` (its communicator `index` of `c`) with `peer` and waits
  // until it is enqueued on the stream (not until it ran: the peer may still be a layer
  // behind). An error, an abort or the run's deadline aborts the group and throws.
  template <typename F>
  void call(Communicators& c, size_t index, int rank, int peer, const char* what, F&& op) {
    Clock::time_point deadline;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_.empty()) {
        throw Error("halo exchange (rank " + std::to_string(rank) + "): " + failure_, kExitFailure);
      }
      deadline = deadline_;
    }
    std::string error;
    bool ok = false;
    {
      std::shared_lock<std::shared_mutex> use(c.use);
      if (c.aborted) {
        error = "the communicator was aborted";
      } else {
        const ncclResult_t r = op(c.comms[index]);
        ok = r == ncclSuccess || r == ncclInProgress;
        if (!ok) error = nccl_text(r);
      }
    }
    if (ok) ok = settle(c, index, deadline, error);
    if (!ok) {
      const std::string why = std::string(what) + " from rank " + std::to_string(rank) +
                              " (cuda:" + std::to_string(devices_[size_t(rank)]) + ") to rank " +
                              std::to_string(peer) + ": " + error;
      abort("NCCL " + why);
      throw Error("halo exchange: NCCL " + why, kExitFailure);
    }
  }
  // Host values go through the process's memory (every rank is a thread of it), bounded by the
  // run's deadline like the NCCL operations.
  void send_values(int rank, int to, const std::vector<int64_t>& values) {
    check(rank, to);
    values_.send(rank, to, values);
  }
  std::vector<int64_t> recv_values(int from, int rank) {
    check(rank, from);
    Clock::time_point deadline;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      deadline = deadline_;
    }
    std::optional<std::vector<int64_t> > got = values_.recv(from, rank, deadline, [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      return failure_;
    });
    if (!got) {
      const std::string why = "values from rank " + std::to_string(from) + " to rank " +
                              std::to_string(rank) + ": timed out";
      abort("NCCL " + why);
      throw Error("halo exchange: " + why, kExitFailure);
    }
    return std::move(*got);
  }
  // A ring hand-off through handoffs_ (a copy on the sender's stream and its event; the
  // receiver's stream waits for it). A failed hand-off fails the NCCL run too.
  void handoff_send(int rank, int to, const at::Tensor& t) {
    handoffs_.rank(rank).send(to, t);
    count(rank, int64_t(t.nbytes()));
  }
  void handoff_recv(int from, int rank, at::Tensor& into) {
    try {
      handoffs_.rank(rank).recv(from, into);
    } catch (const Error& e) {
      abort(std::string("NCCL hand-off: ") + e.what());
      throw;
    }
  }
  void count(int rank, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.messages += 1;
    stats_.bytes += bytes;
    stats_.ranks[size_t(rank)].messages += 1;
    stats_.ranks[size_t(rank)].bytes += bytes;
  }
  // Each queued operation of this run, by view (0: the group's, 1: the time split's pairs) and
  // direction, at both ends.
  struct Tally {
    int64_t sends = 0, send_bytes = 0, recvs = 0, recv_bytes = 0;
  };
  void note(int view, int from, int to, bool send, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Tally& t = ledger_[{view, from, to}];
    (send ? t.sends : t.recvs) += 1;
    (send ? t.send_bytes : t.recv_bytes) += bytes;
  }
  std::string unmatched_locked() const {
    std::string out;
    for (const auto& [key, t] : ledger_) {
      if (t.sends == t.recvs && t.send_bytes == t.recv_bytes) continue;
      const auto& [view, from, to] = key;
      out += std::string(out.empty() ? "" : "; ") + (view ? "pair " : "group ") +
             std::to_string(from) + "->" + std::to_string(to) + ": " + std::to_string(t.sends) +
             " sends (" + std::to_string(t.send_bytes) + " bytes), " + std::to_string(t.recvs) +
             " receives (" + std::to_string(t.recv_bytes) + " bytes)";
    }
    return out;
  }

  std::vector<int> devices_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Rank> > ranks_;
  std::vector<std::unique_ptr<Pipe> > pipes_;
  std::map<std::pair<int, int>, std::shared_ptr<Link> > links_;  // by (from, to) rank
  mutable std::mutex mutex_;
  int active_ = 0;
  std::string failure_;
  std::shared_ptr<Communicators> comms_;
  Clock::time_point deadline_{};
  ExchangeStats stats_;
  std::map<std::tuple<int, int, int>, Tally> ledger_;  // this run's, by (view, from, to)
  ValueMailbox values_;
  InProcessGroup handoffs_{int(devices_.size()), timeout_};  // the last rank's hand-offs to rank 0
};

}  // namespace

std::unique_ptr<ExchangeGroup> nccl_group(const std::vector<int>& devices,
                                          std::chrono::milliseconds timeout) {
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    throw Error("NCCL halo exchange: one rank per GPU (a device repeats)", kExitDataErr);
  }
  if (lazy_module_loading()) {
    static std::once_flag said;
    std::call_once(said, [] {
      log::warn("nccl",
                "CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING=EAGER was not "
                "set before CUDA started), and a kernel's first load can deadlock against NCCL's "
                "waiting kernels: the ranks exchange in-process instead");
    });
    return std::make_unique<InProcessGroup>(int(devices.size()), timeout);
  }
  return std::make_unique<NcclGroup>(devices, timeout);
}

#endif

}  // namespace wm::parallel
