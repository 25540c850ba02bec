#include "parallel/rank_fault.h"

#include <stdexcept>
#include <thread>

#include "parallel/exchange_group.h"
#include "parallel/torch_side.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"
#include "src/models/torch_side.h"

namespace wm::parallel {

namespace {

// The number after `prefix` at the start of `part`, or -1.
int64_t number_after(const std::string& part, const std::string& prefix) {
  if (part.compare(0, prefix.size(), prefix) != 0 || part.size() == prefix.size()) return -1;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < part.size(); ++i) {
    if (part[i] < '0' || part[i] > '9' || v > 1000000) return -1;
    v = v * 10 + (part[i] - '0');
  }
  return v;
}

// The first line of a message (LibTorch's what() goes on with "Exception raised from ..." and a
// backtrace).
std::string first_line(const std::string& text) {
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

class FaultyExchange final : public exec::HaloExchange {
 public:
  FaultyExchange(exec::HaloExchange& inner, Fault& fault, int rank, int64_t slice,
                 const ExchangeGroup& group, std::chrono::milliseconds timeout)
      : inner_(inner),
        fault_(fault),
        rank_(rank),
        slice_(slice),
        group_(group),
        timeout_(timeout) {}
  int rank() const override { return inner_.rank(); }
  int ranks() const override { return inner_.ranks(); }
  int history_from() const override { return inner_.history_from(); }
  int history_to() const override { return inner_.history_to(); }
  void send(int to, const at::Tensor& t) override {
    check();
    inner_.send(to, t);
  }
  void recv(int from, at::Tensor& into) override {
    check();
    inner_.recv(from, into);
  }
  void send_values(int to, const std::vector<int64_t>& values) override {
    check();
    inner_.send_values(to, values);
  }
  std::vector<int64_t> recv_values(int from) override {
    check();
    return inner_.recv_values(from);
  }

 private:
  void check() {
    if (!fault_.fires(rank_, slice_)) return;
    if (fault_.spec().kind != FaultSpec::Kind::kHang)
      fault_.raise(rank_, slice_, &group_, timeout_);
    // A hung rank answers nobody; once its peers or the session gave up on it, the exchange call
    // it was making fails with the group's failure, as theirs did (so the reported cause is the
    // timeout, whichever rank's error is reported).
    fault_.hang(rank_, slice_, group_, timeout_);
  }
  exec::HaloExchange& inner_;
  Fault& fault_;
  int rank_;
  int64_t slice_;
  const ExchangeGroup& group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

FaultSpec parse_fault(const std::string& text) {
  FaultSpec spec;
  if (text.empty()) return spec;
  const std::string usage = "'" + text + "': expected rank<R>:slice<S>:<oom|error|hang>";
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) throw std::invalid_argument(usage);
  const int64_t rank = number_after(text.substr(0, a), "rank");
  const int64_t slice = number_after(text.substr(a + 1, b - a - 1), "slice");
  const std::string kind = text.substr(b + 1);
  if (rank < 0 || rank > 1023 || slice < 0) throw std::invalid_argument(usage);
  spec.rank = int(rank);
  spec.slice = slice;
  if (kind == "oom") {
    spec.kind = FaultSpec::Kind::kOom;
  } else if (kind == "error") {
    spec.kind = FaultSpec::Kind::kError;
  } else if (kind == "hang") {
    spec.kind = FaultSpec::Kind::kHang;
  } else {
    throw std::invalid_argument(usage);
  }
  return spec;
}

bool Fault::fires(int rank, int64_t slice) {
  if (!spec_.armed() || rank != spec_.rank || slice < spec_.slice) return false;
  bool expected = false;
  return fired_.compare_exchange_strong(expected, true);
}

void Fault::raise(int rank, int64_t slice, const ExchangeGroup* group,
                  std::chrono::milliseconds timeout) const {
  const std::string where =
      " (fault injection: rank " + std::to_string(rank) + ", slice " + std::to_string(slice) + ")";
  // LibTorch's own errors, as a failing rank's would be (the LibTorch side throws them).
  const TorchDevices& torch = torch_devices();
  switch (spec_.kind) {
    case FaultSpec::Kind::kOom:
      torch.throw_torch_error(true, "CUDA out of memory. Tried to allocate 2.00 GiB" + where);
      break;
    case FaultSpec::Kind::kHang: {
      // A rank whose device stopped: it answers nobody until the exchange is given up.
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!(group && group->failed()) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      torch.throw_torch_error(false, "stopped answering" + where);
      break;
    }
    case FaultSpec::Kind::kError:
    case FaultSpec::Kind::kNone:
    default:
      torch.throw_torch_error(false,
                              "CUDA error: an illegal memory access was encountered" + where);
  }
  throw Error("fault injection: LibTorch's error was not thrown", kExitSoftware);
}

void Fault::hang(int rank, int64_t slice, const ExchangeGroup& group,
                 std::chrono::milliseconds timeout) const {
  // The peers' receives and the session give up after `timeout`; a slow machine gets slack
  // before this rank stops waiting for them (and fails on its own).
  const auto deadline = std::chrono::steady_clock::now() + 3 * timeout + std::chrono::seconds(10);
  while (!group.failed()) {
    if (std::chrono::steady_clock::now() >= deadline) raise(rank, slice, &group, timeout);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::unique_ptr<exec::HaloExchange> faulty_exchange(exec::HaloExchange& inner, Fault& fault,
                                                    int rank, int64_t slice,
                                                    const ExchangeGroup& group,
                                                    std::chrono::milliseconds timeout) {
  return std::make_unique<FaultyExchange>(inner, fault, rank, slice, group, timeout);
}

void rethrow_rank_failure(std::exception_ptr failure, int rank, const Device& device, int64_t slice,
                          bool name_rank) {
  const std::string who = name_rank ? "rank " + std::to_string(rank) + " (" + device.str() +
                                          "), slice " + std::to_string(slice) + ": "
                                    : std::string();
  try {
    std::rethrow_exception(failure);
  } catch (const ModelError& e) {
    throw ModelError(who + first_line(e.what()), e.exit_code());
  } catch (const Error&) {
    throw;  // Cancelled, InputError: already one line naming what they are about
  } catch (...) {
  }
  // LibTorch's errors (out of memory, CUDA, NCCL) exist only where LibTorch is loaded; its side
  // tells them apart.
  if (models::torch_side_loaded()) torch_devices().rethrow_torch_error(failure, who);
  try {
    std::rethrow_exception(failure);
  } catch (const std::bad_alloc&) {
    throw ModelError(who + "out of host memory", kExitFailure);
  } catch (const std::exception& e) {
    throw ModelError(who + first_line(e.what()), kExitSoftware);
  }
}

}  // namespace wm::parallel
