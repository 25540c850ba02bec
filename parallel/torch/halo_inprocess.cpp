#include "parallel/halo_inprocess.h"

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/PeerToPeerAccess.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "parallel/value_mailbox.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"

namespace wm::parallel {

namespace {

#ifdef WMBATCH_WITH_CUDA
// Copies `src` (another GPU's, dense) into `into` on the receiver's `stream`, by the copy engines.
// Tensor::copy_ between GPUs runs on the sender's device, as a kernel where the layouts differ (a
// band's halo rows: channels-last rows into a contiguous buffer), and that kernel waits for SMs
// behind the sender's running convolution: every halo of a row split waited for the neighbour's
// conv, and the two GPUs took turns (2 × H200, 720p: 77 % busy, 1.52×).
void copy_between_gpus(at::Tensor& into, const at::Tensor& src,
                       const c10::cuda::CUDAStream& stream) {
  const int from = src.get_device(), to = into.get_device();
  at::cuda::get_p2p_access(to, from);  // direct over NVLink where the pair allows it
  const bool same_layout = into.is_non_overlapping_and_dense() && into.strides() == src.strides();
  at::Tensor local =
      same_layout ? into : at::empty_strided(src.sizes(), src.strides(), into.options());
  C10_CUDA_CHECK(cudaMemcpyPeerAsync(local.data_ptr(), to, src.data_ptr(), from, src.nbytes(),
                                     stream.stream()));
  if (!same_layout) into.copy_(local, /*non_blocking=*/true);  // on the receiver's device
}
#endif

struct Message {
  at::Tensor data;
#ifdef WMBATCH_WITH_CUDA
  std::shared_ptr<at::cuda::CUDAEvent> ready;  // recorded after the copy on the sender's stream
#endif
};

}  // namespace

struct InProcessGroup::Impl {
  class Rank final : public exec::HaloExchange {
   public:
    Rank(Impl& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override { return group_.active; }
    void send(int to, const at::Tensor& t) override { group_.send(rank_, to, t.clone()); }
    void give(int to, at::Tensor&& t) override {
      group_.send(rank_, to, t.is_non_overlapping_and_dense() ? std::move(t) : t.clone());
    }
    void recv(int from, at::Tensor& into) override { group_.recv(from, rank_, into); }
    void send_values(int to, const std::vector<int64_t>& values) override {
      group_.send_values(rank_, to, values);
    }
    std::vector<int64_t> recv_values(int from) override { return group_.recv_values(from, rank_); }

   private:
    Impl& group_;
    int rank_;
  };

  Impl(int n, std::chrono::milliseconds t) : timeout(t) {
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<Rank>(*this, r));
    stats.ranks.resize(size_t(n));
  }

  void check_peer(int from, int to) const {
    if (from < 0 || to < 0 || from >= active || to >= active || from == to) {
      throw Error("halo exchange: no link from rank " + std::to_string(from) + " to rank " +
                      std::to_string(to) + " among " + std::to_string(active) + " ranks",
                  kExitFailure);
    }
  }

  // `t`: a copy made for the message, or a tensor its sender gave up (HaloExchange::give); either
  // way written on the sender's current stream (CUDA) before the event recorded here.
  void send(int from, int to, at::Tensor t) {
    Message m;
    m.data = std::move(t);
#ifdef WMBATCH_WITH_CUDA
    if (m.data.is_cuda()) {
      m.ready = std::make_shared<at::cuda::CUDAEvent>();
      m.ready->record(c10::cuda::getCurrentCUDAStream(m.data.device().index()));
    }
#endif
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.empty())
      throw Error("halo exchange (rank " + std::to_string(from) + "): " + failure, kExitFailure);
    check_peer(from, to);
    stats.messages += 1;
    stats.bytes += int64_t(m.data.nbytes());
    stats.ranks[size_t(from)].messages += 1;
    stats.ranks[size_t(from)].bytes += int64_t(m.data.nbytes());
    queues[{from, to}].push_back(std::move(m));
    arrived.notify_all();
  }

  void recv(int from, int to, at::Tensor& into) {
    const auto start = std::chrono::steady_clock::now();
    Message m;
    {
      std::unique_lock<std::mutex> lock(mutex);
      check_peer(from, to);
      std::deque<Message>& q = queues[{from, to}];
      const bool ok =
          arrived.wait_for(lock, timeout, [&] { return !failure.empty() || !q.empty(); });
      if (!failure.empty()) {
        throw Error("halo exchange (rank " + std::to_string(to) + "): " + failure, kExitFailure);
      }
      if (!ok) {
        failure = "rank " + std::to_string(to) + " waited " +
                  std::to_string(timeout.count() / 1000) + " s for rank " + std::to_string(from);
        arrived.notify_all();
        throw Error("halo exchange: " + failure, kExitFailure);
      }
      m = std::move(q.front());
      q.pop_front();
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      stats.wait_seconds += waited;
      stats.ranks[size_t(to)].wait_seconds += waited;
    }
    // The message is a copy nobody else holds: when `into` is the only handle on memory of the
    // same layout, it becomes the message (no copy; the causal histories of a time split are
    // whole frames of a layer, up to 0.8 GB each at 1080p).
    const bool adopt =
        into.defined() && into.use_count() == 1 && into.storage().use_count() == 1 &&
        into.storage_offset() == 0 && int64_t(into.storage().nbytes()) == int64_t(into.nbytes()) &&
        m.data.sizes() == into.sizes() && m.data.strides() == into.strides() &&
        m.data.scalar_type() == into.scalar_type() && m.data.device() == into.device();
    if (m.data.sizes() != into.sizes() || m.data.scalar_type() != into.scalar_type()) {
      const std::string why = "rank " + std::to_string(to) + " expected a message of " +
                              std::to_string(into.numel()) + " values from rank " +
                              std::to_string(from) + ", got " + std::to_string(m.data.numel());
      abort(why);
      throw Error("halo exchange: " + why, kExitFailure);
    }
#ifdef WMBATCH_WITH_CUDA
    if (m.ready && into.is_cuda()) {
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(into.device().index());
      m.ready->block(stream);
      // The message's memory belongs to the sender's stream: its allocator block must not be
      // reused before this stream's work on it is done.
      m.data.record_stream(stream);
      if (adopt) {
        into = m.data;
      } else if (m.data.device() != into.device() && m.data.is_non_overlapping_and_dense()) {
        copy_between_gpus(into, m.data, stream);
      } else {
        into.copy_(m.data, /*non_blocking=*/true);
      }
      return;
    }
    if (m.ready) m.ready->synchronize();
#endif
    if (adopt) {
      into = m.data;
    } else {
      into.copy_(m.data);
    }
  }

  void send_values(int from, int to, const std::vector<int64_t>& values) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure.empty())
        throw Error("halo exchange (rank " + std::to_string(from) + "): " + failure, kExitFailure);
      check_peer(from, to);
    }
    mailbox.send(from, to, values);
  }

  std::vector<int64_t> recv_values(int from, int to) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      check_peer(from, to);
    }
    std::optional<std::vector<int64_t>> got =
        mailbox.recv(from, to, std::chrono::steady_clock::now() + timeout, [this] {
          std::lock_guard<std::mutex> lock(mutex);
          return failure;
        });
    if (!got) {
      const std::string why = "rank " + std::to_string(to) + " waited " +
                              std::to_string(timeout.count() / 1000) + " s for rank " +
                              std::to_string(from);
      abort(why);
      throw Error("halo exchange: " + why, kExitFailure);
    }
    return std::move(*got);
  }

  void abort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (failure.empty()) failure = why;
      arrived.notify_all();
    }
    mailbox.wake();
  }

  std::chrono::milliseconds timeout;
  std::vector<std::unique_ptr<Rank>> ranks;
  int active = 0;
  mutable std::mutex mutex;
  std::condition_variable arrived;
  std::map<std::pair<int, int>, std::deque<Message>> queues;
  std::string failure;  // non-empty: the run failed
  ExchangeStats stats;
  ValueMailbox mailbox;
};

InProcessGroup::InProcessGroup(int ranks, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(ranks, timeout)) {}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return int(impl_->ranks.size()); }

void InProcessGroup::begin(int active) {
  impl_->mailbox.clear();  // (its lock is never taken inside the group's)
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->queues.clear();
  impl_->failure.clear();
  impl_->active = std::min<int>(active, int(impl_->ranks.size()));
}

exec::HaloExchange& InProcessGroup::rank(int r) { return *impl_->ranks.at(size_t(r)); }

void InProcessGroup::abort(const std::string& why) { impl_->abort(why); }

bool InProcessGroup::failed() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return !impl_->failure.empty();
}

ExchangeStats InProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace wm::parallel
