#include "src/models/seedvr2/seedvr2_vae.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>

#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#ifdef WMBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "src/base/error.h"
#include "src/base/fault_point.h"
#include "src/base/log_text.h"
#include "src/exec/device_context.h"
#include "src/exec/halo_exchange.h"
#include "src/models/seedvr2/torch/seedvr2_blocks.h"
#include "src/models/seedvr2/torch/seedvr2_sequence.h"
#include "src/models/torch/state_tensor.h"
#include "src/models/torch/tensor.h"
#include "src/models/torch/weights_file.h"
#include "src/weights/safetensors.h"
#include "src/weights/torch_pickle.h"

namespace wm::models {

using seedvr2::Architecture;
using seedvr2::Network;
using seedvr2::ParamSpec;
using seedvr2::StreamState;

namespace {

// Recommended spatial tile overlap in latent pixels (traits().halo; tiles are never exact, see
// seedvr2_vae.h). Seam errors measured on the golden model: docs/seedvr2-vae.md.
constexpr int kHaloLatent = 8;

constexpr const char* kLogger = "seedvr2-vae";

// Attempts per slice: the first, then retries with smaller plans after running out of device
// memory (each halves the working memory and the device-resident state).
constexpr int kAttempts = 4;

// Every output chunk passes this fault point before it is delivered (the state already moved
// past it): tests/support/seedvr2_fault.h makes one run out of memory there.
void chunk_fault_point(const at::Tensor& chunk) {
  fault_point(FaultPoint::kSeedvr2VaeChunk, int64_t(chunk.numel()));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_decoder(const ModelConfig& config) {
  if (config.task == "decode") return true;
  if (config.task == "encode") return false;
  throw ModelError("seedvr2-vae: task must be decode or encode, not '" + config.task + "'");
}

// Host float32 parameters by key.
using ParamMap = std::map<std::string, at::Tensor>;

// The architecture and parameters of the half (`decoder` or encoder) a task needs. Keys of that
// half must be present with the shapes the architecture implies; keys of the other half are
// optional but must be shaped right; keys outside the layout are errors. The first problem is
// named (with a count of the others).
ParamMap load_params(const ModelConfig& config, bool decoder, Architecture& arch) {
  if (config.weights.empty()) {
    throw ModelError("seedvr2-vae: model.weights (a .safetensors or .pth file) is required");
  }
  const WeightsFile file(config.weights);
  arch = seedvr2::infer_architecture(
      [&](const std::string& key) -> const std::vector<int64_t>* {
        const io::TensorInfo* t = file.find(key);
        return t ? &t->shape : nullptr;
      },
      decoder, options_as<Seedvr2VaeOptions>(config).norm_groups);
  const std::vector<ParamSpec> specs = seedvr2::layout(arch);

  std::vector<ExpectedTensor> expected;
  for (bool own : {true, false}) {
    for (const ParamSpec& spec : specs) {
      if ((spec.decoder == decoder) == own) expected.push_back({spec.key, spec.shape, own});
    }
  }
  check_tensors(file, expected, "seedvr2-vae " + arch.str());
  arch.validate();

  ParamMap params;
  for (const ParamSpec& spec : specs) {
    if (spec.decoder != decoder) continue;
    params.emplace(spec.key, host_tensor(*file.find(spec.key)));
  }
  return params;
}

bool ends_with_key(const std::string& key, const char* suffix) { return ends_with(key, suffix); }

ParamMap random_params(const Architecture& arch, bool decoder, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  ParamMap params;
  for (const ParamSpec& spec : seedvr2::layout(arch)) {
    if (spec.decoder != decoder) continue;
    const at::Tensor u = at::rand(spec.shape, gen, at::kFloat);  // U[0, 1)
    const bool norm = spec.shape.size() == 1 && (spec.key.find("norm") != std::string::npos);
    at::Tensor t;
    if (norm) {
      t = ends_with_key(spec.key, ".weight") ? 1.0 + (u * 2 - 1) * 0.25 : (u * 2 - 1) * 0.25;
    } else if (spec.shape.size() > 1) {
      int64_t fan_in = 1;
      for (size_t i = 1; i < spec.shape.size(); ++i) fan_in *= spec.shape[i];
      t = (u * 2 - 1) * std::sqrt(3.0 / double(fan_in));
    } else {
      t = (u * 2 - 1) * 0.1;
    }
    params.emplace(spec.key, t);
  }
  return params;
}

// What the calls of a model's sessions on one device learned about plans: per frame size, the
// most phases a call needed after fewer ran out of device memory (a plan that fits a fresh
// allocator can fail once what ran before has fragmented its cache; later calls start there,
// rather than fail again first).
class PlanHistory {
 public:
  int least_phases(int64_t h, int64_t w) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = phases_.find({h, w});
    return it == phases_.end() ? 0 : it->second;
  }
  void ran_phases(int64_t h, int64_t w, int phases) {
    std::lock_guard<std::mutex> lock(mutex_);
    int& least = phases_[{h, w}];
    least = std::max(least, phases);
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, int> phases_;
};

class SeedVR2Session final : public ModelSession, public Seedvr2SequenceSession {
 public:
  SeedVR2Session(const ModelTraits& traits, std::shared_ptr<const Network> net,
                 std::shared_ptr<PlanHistory> history, at::Device device, at::ScalarType dtype,
                 bool logvar)
      : traits_(traits),
        net_(std::move(net)),
        history_(std::move(history)),
        device_(device),
        dtype_(dtype),
        logvar_(logvar) {}

  Planar run(Planar&& input, const RunContext& ctx) override {
    check(input, ctx);
    // A sequence-parallel rank that takes its memory from another rank (every rank after the
    // first, and rank 0 after a slice whose last rank handed its own on) starts empty.
    const bool follower = ctx.halo && ctx.halo->history_from() >= 0;
    if (ctx.first_slice || follower) tiles_[ctx.tile_index] = StreamState{};
    StreamState& state = tiles_[ctx.tile_index];
    // Each call takes every conv's memory once (sequence parallelism: the ring).
    state.received.assign(size_t(net_->state_slots()), 0);
    state.sends = true;
    // The state before this slice, kept until the slice succeeds: a snapshot (slot tensors are
    // replaced, never written in place), restored when an attempt runs out of device memory.
    // Sequence-parallel ranks exchange histories as they go, so they do not retry.
    bool retry = !ctx.halo && net_->tuning().oom_retry;
#ifdef WMBATCH_WITH_CUDA
    // On a device the snapshot keeps the old state alive beside the new: only where that costs
    // no speed (the plan that counts the state twice keeps as much of it on the device as the
    // plan that does not). Otherwise memory goes to the state and an out-of-memory error fails
    // the slice (exit 1), as without the retry.
    if (retry && device_.is_cuda() && !ctx.first_slice) {
      const c10::cuda::CUDAGuard device_guard(device_.index());
      retry = plan(input.height, input.width, state, ctx, 0, true).host_state ==
              plan(input.height, input.width, state, ctx, 0, false).host_state;
    }
#endif
    const StreamState before = retry ? state : StreamState{};
    // Without tensors of the session's device in the snapshot, that device's memory may be
    // written in place (set again on every attempt: a restored state carries the snapshot's flag).
    bool in_place = true;
    for (const at::Tensor& m : before.memory) {
      if (m.defined() && m.device().type() == device_.type()) in_place = false;
    }
    try {
      Planar out = guarded(traits_.name.c_str(), [&] {
        c10::InferenceMode inference;
#ifdef WMBATCH_WITH_CUDA
        if (device_.is_cuda()) {
          // A device worker (ctx.device) made its compute stream current; a direct call computes
          // on its thread's direct context's.
          std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
          if (!ctx.device) {
            stream_guard.emplace(c10::cuda::CUDAStream(
                exec::device_layer().direct_context(device_).compute_stream()));
          }
          const c10::cuda::CUDAGuard device_guard(device_.index());
          const at::Tensor x = upload(std::move(input), ctx);
          return attempts(before, state, ctx, retry, [&](int attempt) {
            state.in_place = in_place;
            return run_cuda(x, state, ctx, attempt, retry);
          });
        }
#endif
        const at::Tensor x = to_tensor(std::move(input)).to(device_, dtype_);
        return attempts(before, state, ctx, retry, [&](int attempt) {
          state.in_place = in_place;
          at::Tensor y = run_cpu(x, state, ctx, attempt);
          if (!net_->decoder() && !logvar_) y = y.narrow(1, 0, net_->arch().latent_channels);
          return to_slice_output(to_planar(y), ctx);
        });
      });
      state.halo = nullptr;
      state.context = nullptr;
      return out;
    } catch (...) {
      tiles_.erase(ctx.tile_index);  // half-updated state must not feed a later slice
      throw;
    }
  }

  // A rank keeps its whole causal state on its device (plan(): its memory passes to the next
  // rank, never through host memory): it holds it when the state fits the budget plan() gives
  // it there, its share of the device less what is allocated besides this session's state and
  // the reserve. 1080p in 16 GiB: 17.9 GB of state against ~5 GiB for each of two ranks.
  bool rank_holds_state(int height, int width, int device_ranks,
                        exec::DeviceContext* device) const override {
#ifdef WMBATCH_WITH_CUDA
    if (!device_.is_cuda()) return true;
    const int64_t total = state_bytes(height, width, int64_t(c10::elementSize(dtype_)));
    int64_t resident = 0;
    for (const auto& [tile, state] : tiles_) resident += device_bytes(state);
    const seedvr2::Tuning& tuning = net_->tuning();
    if (tuning.device_state_mib > 0) return total <= tuning.device_state_mib << 20;
    const Room room = device_room(height, width, resident, std::max(1, device_ranks), device);
    return total <= room.avail - room.reserve;
#else
    (void)height, (void)width, (void)device_ranks, (void)device;
    return true;
#endif
  }

  at::Tensor run_sequence(const at::Tensor& x, const RunContext& outer) override {
    const ModelTraits& t = traits_;
    if (x.dim() != 5 || x.size(0) != 1 || x.size(1) != t.in_channels) {
      throw ModelError(t.name + ": expected a [1, " + std::to_string(t.in_channels) +
                       ", T, H, W] sequence");
    }
    RunContext ctx;
    ctx.first_slice = true;
    ctx.last_slice = true;
    ctx.device = outer.device;
    // A rank of a sequence split in time (the SeedVR2 upscaler's split batch): its run of frames
    // takes each conv's history from the rank before and hands its own on (outer.first_slice:
    // this run holds the sequence's first frame).
    ctx.halo = outer.halo;
    if (outer.halo) ctx.first_slice = outer.first_slice;
    constexpr int kTile = -1;  // apart from the tiles run() keeps
    tiles_[kTile] = StreamState{};
    StreamState& state = tiles_[kTile];
    state.received.assign(size_t(net_->state_slots()), 0);
    state.sends = true;
    // Ranks exchange histories as they go, so they do not retry.
    const bool retry = !ctx.halo && net_->tuning().oom_retry;
    const StreamState before = state;
    try {
      at::Tensor y = guarded(t.name.c_str(), [&] {
        c10::InferenceMode inference;
#ifdef WMBATCH_WITH_CUDA
        if (device_.is_cuda()) {
          // A direct call computes on its thread's direct context's compute stream; `x` was made
          // on the caller's stream, and the output is used there: each stream waits for the
          // other's work (without this the pass read its input before the caller had written it:
          // a SeedVR2 upscale called directly on an H200 gave other frames each run).
          const c10::cuda::CUDAStream caller =
              c10::cuda::getCurrentCUDAStream(x.is_cuda() ? x.device().index() : device_.index());
          std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
          if (!ctx.device) {
            const c10::cuda::CUDAStream compute(
                exec::device_layer().direct_context(device_).compute_stream());
            at::cuda::CUDAEvent made;
            made.record(caller);
            made.block(compute);
            stream_guard.emplace(compute);
          }
          const c10::cuda::CUDAGuard device_guard(device_.index());
          const at::Tensor in = fresh_copy(x);
          at::Tensor out = attempts(before, state, ctx, retry, [&](int attempt) {
            state.in_place = true;
            std::vector<at::Tensor> parts;
            forward_cuda(in, state, ctx, attempt, retry, [&](const at::Tensor& y) {
              chunk_fault_point(y);
              parts.push_back(y.clone());  // (a chunk may live in a buffer the next one reuses)
            });
            return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
          });
          if (stream_guard) {
            const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
            at::cuda::CUDAEvent done;
            done.record(compute);
            done.block(caller);
            // The caller may free x while this stream still reads it.
            if (x.is_cuda()) x.record_stream(compute);
            out.record_stream(caller);
          }
          return out;
        }
#endif
        const at::Tensor in = fresh_copy(x);
        return attempts(before, state, ctx, retry, [&](int attempt) {
          state.in_place = true;
          return run_cpu(in, state, ctx, attempt);
        });
      });
      tiles_.erase(kTile);
      if (!net_->decoder() && !logvar_) y = y.narrow(1, 0, net_->arch().latent_channels);
      return y;
    } catch (...) {
      tiles_.erase(kTile);
      throw;
    }
  }

  // State tensors: "tile<k>.count" (I64 [1]: the slot count) and "tile<k>.memory<i>" for each
  // defined slot.
  bool export_state(std::vector<StateTensor>& out) const override {
    return guarded((traits_.name + ": saving the causal state").c_str(), [&] {
#ifdef WMBATCH_WITH_CUDA
      // The memory may come from a stream other than the current one (a direct call's own).
      if (device_.is_cuda()) c10::cuda::device_synchronize();
#endif
      std::vector<StateTensor> all;
      for (const auto& [k, state] : tiles_) {
        const std::string tile = "tile" + std::to_string(k) + ".";
        at::Tensor count = at::full({1}, int64_t(state.memory.size()), at::kLong);
        all.push_back(export_tensor(tile + "count", count));
        for (size_t i = 0; i < state.memory.size(); ++i) {
          if (state.memory[i].defined()) {
            all.push_back(export_tensor(tile + "memory" + std::to_string(i), state.memory[i]));
          }
        }
      }
      out.insert(out.end(), std::make_move_iterator(all.begin()),
                 std::make_move_iterator(all.end()));
      return true;
    });
  }

  bool import_state(const std::vector<StateTensor>& in) override {
    return guarded((traits_.name + ": loading the causal state").c_str(), [&] {
      std::map<int, StreamState> tiles;
      // "tile<k>.<rest>" → k and rest; false when the name is not of that form.
      auto split = [](const std::string& name, int& k, std::string& rest) {
        if (name.rfind("tile", 0) != 0) return false;
        const size_t dot = name.find('.');
        if (dot == std::string::npos || dot == 4 || dot > 13) return false;
        for (size_t i = 4; i < dot; ++i) {
          if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
        }
        k = std::stoi(name.substr(4, dot - 4));
        rest = name.substr(dot + 1);
        return true;
      };
      for (const StateTensor& s : in) {
        int k = 0;
        std::string rest;
        if (!split(s.name, k, rest)) return false;
        if (rest != "count") continue;
        if (s.dtype != "I64" || s.shape != std::vector<int64_t>{1} || s.bytes.size() != 8) {
          return false;
        }
        int64_t n = 0;
        std::memcpy(&n, s.bytes.data(), 8);
        if (n < 0 || n > 100000) return false;
        tiles[k].memory.resize(size_t(n));
      }
      for (const StateTensor& s : in) {
        int k = 0;
        std::string rest;
        split(s.name, k, rest);
        if (rest == "count") continue;
        auto it = tiles.find(k);
        if (it == tiles.end() || rest.rfind("memory", 0) != 0 || rest.size() == 6 ||
            rest.size() > 12) {
          return false;
        }
        for (size_t i = 6; i < rest.size(); ++i) {
          if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
        }
        const size_t i = size_t(std::stoul(rest.substr(6)));
        if (i >= it->second.memory.size()) return false;
        it->second.memory[i] = import_tensor(s, device_);
        if (!it->second.memory[i].defined()) return false;
      }
      if (tiles.empty()) return false;
      tiles_ = std::move(tiles);
      return true;
    });
  }

 private:
  // Runs `attempt(k)` for k = 0, 1, ... until one does not run out of device memory; before a
  // retry the state goes back to `before` (what the failed attempt changed is dropped) and the
  // allocator's cache is released. Each attempt makes the slice's whole output again, so no
  // frame is lost or delivered twice.
  template <typename Fn>
  auto attempts(const StreamState& before, StreamState& state, const RunContext& ctx, bool retry,
                Fn&& attempt) -> decltype(attempt(0)) {
    for (int k = 0;; ++k) {
      state.halo = ctx.halo;
      state.context = ctx.device;
      try {
        return attempt(k);
      } catch (const c10::OutOfMemoryError& e) {
        if (!retry || k + 1 >= kAttempts) throw;
        state = before;
#ifdef WMBATCH_WITH_CUDA
        if (device_.is_cuda()) {
          c10::cuda::device_synchronize();
          c10::cuda::CUDACachingAllocator::emptyCache();
        }
#endif
        log::warn(kLogger, traits_.name + ": out of device memory in slice " +
                               std::to_string(ctx.slice_index) + "; retrying it with a smaller " +
                               "plan (attempt " + std::to_string(k + 2) + " of " +
                               std::to_string(kAttempts) + ")");
      }
    }
  }

  // CPU: the whole slice in one pass, or (tuning work_mib, host_state=1) the stage-by-stage
  // path in time chunks with the state kept as on a device (the same code as CUDA's; on the
  // CPU "host" and "device" memory are one, so it computes exactly the same thing).
  at::Tensor run_cpu(const at::Tensor& x, StreamState& state, const RunContext& ctx, int attempt) {
    const seedvr2::Tuning& tuning = net_->tuning();
    // (A sequence-parallel rank's memory passes to the next rank: never host memory.)
    const bool host = tuning.host_state == 1 && !ctx.halo;
    if (host) state.on_host.assign(size_t(net_->state_slots()), 1);
    int64_t work = tuning.work_mib << 20;
    if (work <= 0 && !host && tuning.phased <= 0) {
      at::Tensor y = net_->forward(x, state, ctx.first_slice);
      chunk_fault_point(y);
      return y;
    }
    work = std::max<int64_t>(work >> attempt, 1);
    std::vector<at::Tensor> parts;
    auto emit = [&](const at::Tensor& y) {
      chunk_fault_point(y);
      parts.push_back(y);
    };
    if (tuning.phased > 0) {
      forward_phased_ranges(x, state, ctx, net_->phase_starts(tuning.phased + 1), {work}, emit);
    } else {
      net_->forward_chunks(x, state, ctx.first_slice, work, emit);
    }
    return parts.size() == 1 ? parts[0] : at::cat(parts, 2);
  }

  // The whole causal state (every slot) for input of h × w, elements of `elt` bytes.
  int64_t state_bytes(int64_t h, int64_t w, int64_t elt) const {
    int64_t total = 0;
    for (int k = 0; k < net_->state_slots(); ++k) total += net_->slot_bytes(k, h, w, elt);
    return total;
  }

  // What of `state` lives in device memory now.
  static int64_t device_bytes(const StreamState& state) {
    int64_t bytes = 0;
    for (const at::Tensor& m : state.memory) {
      if (m.defined() && m.is_cuda()) bytes += int64_t(m.nbytes());
    }
    return bytes;
  }

  // Host memory the phases may hold: Tuning::host_mib, else the process's host budget less what
  // other sessions hold of it (exec::DeviceContext::host_memory_available; the device layer
  // measures the budget once: what the host had available less an eighth, at least 8 GiB. Half
  // of it, tried first, cut the 12 GiB one-slice 1080p decode on a 128 GiB host into sub-ranges
  // of 15 + 6 latent frames: 7.06 fps instead of 8.26).
  int64_t host_budget(const RunContext& ctx) {
    const int64_t bytes = net_->tuning().host_bytes;
    if (bytes > 0) return bytes;
    return exec::context_for(ctx.device, device_).host_memory_available(host_hold_.get());
  }

  // Latent frames per sub-range of a slice of `frames` decoded in phases `starts`: as many as
  // keep what the phases hold in host memory — the parked state (all of it, as between slices)
  // and two neighbouring phases' spools (one filling while the one before drains) — within
  // host_budget(), and holds that much of the process's budget (none under Tuning::host_mib).
  // ModelError (exit 1, like running out of device memory) when not even one latent frame fits.
  int64_t phase_range(int64_t frames, int64_t h, int64_t w, int64_t elt,
                      const std::vector<size_t>& starts, const RunContext& ctx) {
    const int64_t state = state_bytes(h, w, elt);
    int64_t per = 0;
    std::vector<int64_t> spool;
    for (size_t q = 1; q < starts.size(); ++q) {
      spool.push_back(net_->stage_input_bytes(starts[q], h, w, elt));
    }
    for (size_t q = 0; q < spool.size(); ++q) {
      per = std::max(per, spool[q] + (q + 1 < spool.size() ? spool[q + 1] : 0));
    }
    if (per == 0) return frames;
    const int64_t budget = host_budget(ctx);
    if (budget - state < per) {
      throw ModelError(
          traits_.name + ": decoding " + std::to_string(h) + "x" + std::to_string(w) +
              " latents in " + std::to_string(starts.size()) + " phases needs " +
              std::to_string((state + per) >> 20) + " MiB of host memory for one latent frame (" +
              std::to_string(state >> 20) + " MiB of causal state, " + std::to_string(per >> 20) +
              " MiB of spools), more than its budget of " + std::to_string(budget >> 20) +
              " MiB (tuning host_mib; default the host's available memory less an eighth, at least "
              "8 GiB)",
          kExitFailure);
    }
    const int64_t n = std::min(frames, (budget - state) / per);
    if (net_->tuning().host_bytes <= 0) {
      if (host_hold_) {
        host_hold_->resize(state + n * per);
      } else {
        host_hold_ = exec::context_for(ctx.device, device_).hold_host_memory(state + n * per);
      }
    }
    return n;
  }

  // Network::forward_phased over the slice, in sub-ranges of its latent frames when the whole
  // slice's spools would not fit the host budget (exact: the causal state carries between
  // sub-ranges as between slices). Between sub-ranges and slices the state waits in host memory
  // (the next slice's snapshot then holds no device memory); after the last slice there is
  // nothing to wait for.
  void forward_phased_ranges(const at::Tensor& x, StreamState& state, const RunContext& ctx,
                             const std::vector<size_t>& starts, const std::vector<int64_t>& works,
                             const std::function<void(const at::Tensor&)>& emit) {
    const int64_t T = x.size(2);
    const int64_t n = phase_range(T, x.size(3), x.size(4), int64_t(x.element_size()), starts, ctx);
    if (n < T && !ranges_logged_) {
      ranges_logged_ = true;
      log::info(kLogger, traits_.name + ": slices of " + std::to_string(T) +
                             " latent frames in sub-ranges of " + std::to_string(n) +
                             " (host memory budget " + std::to_string(host_budget(ctx) >> 20) +
                             " MiB, tuning host_mib)");
    }
    for (int64_t a = 0; a < T; a += n) {
      const int64_t m = std::min(n, T - a);
      // (A sequence-parallel rank's convs hand their memory on in the last sub-range only.)
      state.sends = a + m >= T;
      net_->forward_phased(x.narrow(2, a, m), state, ctx.first_slice && a == 0, starts, works,
                           emit);
      state.sends = true;
      if (a + m < T || !ctx.last_slice) {
        net_->park(state, std::vector<char>(state.memory.size(), 1));
      }
    }
  }

#ifdef WMBATCH_WITH_CUDA
  // How a CUDA attempt runs: the working memory per stage chunk (Tuning::work_mib) and the
  // slots whose causal state lives in host memory (Tuning::host_state).
  struct Plan {
    int64_t work = 0;
    std::vector<char> on_host;
    int64_t device_state = 0, host_state = 0;  // bytes of causal state on each side
    // Network::forward_phased: where the phases start and each one's working memory (work is
    // the first's); device_state is then the largest phase's.
    std::vector<size_t> starts;
    std::vector<int64_t> works;
    // What plan() decided from, for its log line: the state's budget, the device's cap (this
    // rank's share of it), what the allocator had allocated then and the ranks on the device.
    int64_t budget = 0, cap = 0, allocated = 0;
    int64_t share = 1;
  };

  // The device memory plan() divides, for input of h × w on a rank that shares the device with
  // share − 1 others: the cap (its share of the device's budget), what is allocated besides
  // `resident` bytes of this session's state (its share of it), what is left of the cap after
  // that, a tenth of the cap and 768 MiB (avail), and the reserve for one chunk's activations
  // (5 frames of the widest conv input).
  struct Room {
    int64_t allocated = 0, cap = 0, used = 0, avail = 0, reserve = 0;
  };
  Room device_room(int64_t h, int64_t w, int64_t resident, int64_t share,
                   exec::DeviceContext* context) const {
    Room r;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    r.allocated = stats.allocated_bytes[0].current;
    r.cap = exec::context_for(context, device_).device_memory_cap() / share;
    r.used = (r.allocated - resident) / share;
    r.avail = r.cap - r.used - r.cap / 10 - (int64_t(768) << 20);
    r.reserve = 5 * net_->largest_frame_bytes(h, w, int64_t(c10::elementSize(dtype_)));
    return r;
  }

  // The plan for input `x` from the memory budget (or what the device has), after what is
  // allocated now less the device-resident state already counted in it:
  // - the causal state stays on the device when it fits beside a reserve for one chunk's
  //   activations (5 frames of the widest conv input) — always at sizes where it fits, so their
  //   speed is untouched; otherwise the lowest-resolution slots go to host memory until the rest
  //   fits (Network::host_slots). A later slice counts the device state twice: the snapshot of
  //   the state before the slice is kept until the slice succeeds (the out-of-memory retry);
  // - the working memory is a third of what is left then, at most kMostWork (larger chunks
  //   measured no faster; GPU memory stays flat in the video's length);
  // - retry k (after running out of memory) halves both k times.
  Plan plan(int64_t h, int64_t w, const StreamState& state, const RunContext& ctx, int attempt,
            bool snapshot) const {
    const seedvr2::Tuning& tuning = net_->tuning();
    Plan p;
    // A rank of a split slice: its memory passes to the next rank (never host memory), it plans
    // with its share of the device, and it runs whole stages where they fit (a chunked conv
    // hands its memory on after its last chunk only, which holds the next rank back).
    const bool rank = ctx.halo != nullptr;
    const int64_t share = std::max(1, ctx.device_ranks);
    const int64_t slots = net_->state_slots();
    const int64_t elt = int64_t(c10::elementSize(dtype_));
    const int64_t total = state_bytes(h, w, elt), resident = device_bytes(state);
    constexpr int64_t kMostWork = int64_t(4) << 30, kLeastWork = int64_t(256) << 20;
    const int64_t copies = snapshot && !ctx.first_slice ? 2 : 1;
    const Room room = device_room(h, w, resident, share, ctx.device);
    const int64_t allocated = room.allocated, cap = room.cap, used = room.used, avail = room.avail;
    int64_t device_budget = tuning.device_state_mib > 0 ? tuning.device_state_mib << 20
                                                        : (avail - room.reserve) / copies;
    device_budget = std::max<int64_t>(device_budget, 0) >> attempt;
    const int host_state = rank ? 0 : tuning.host_state;
    if (tuning.phased > 0 ||
        (tuning.phased < 0 && net_->phase_starts(2).size() > 1 && tuning.host_state < 0 &&
         tuning.device_state_mib == 0 && total > device_budget)) {
      p = phased_plan(h, w, avail, cap - used, attempt);
      p.budget = device_budget, p.cap = cap, p.allocated = allocated, p.share = share;
      if (rank) {
        p.on_host.assign(size_t(slots), 0);
        p.device_state += p.host_state;
        p.host_state = 0;
      }
      return p;
    }
    if (host_state == 1) {
      p.on_host.assign(size_t(slots), 1);
    } else if (host_state < 0 && total > device_budget) {
      p.on_host = net_->host_slots(h, w, elt, device_budget);
    }
    for (int k = 0; k < slots; ++k) {
      const bool host = size_t(k) < p.on_host.size() && p.on_host[size_t(k)];
      (host ? p.host_state : p.device_state) += net_->slot_bytes(k, h, w, elt);
    }
    if (tuning.work_mib > 0) {
      p.work = tuning.work_mib << 20;
    } else if (rank) {
      p.work = std::max<int64_t>((avail - p.device_state) * 2 / 3, kLeastWork);
    } else {
      p.work = std::clamp<int64_t>((avail - copies * p.device_state) / 3, kLeastWork, kMostWork);
    }
    p.work = std::max<int64_t>(p.work >> attempt, 1);
    p.budget = device_budget, p.cap = cap, p.allocated = allocated, p.share = share;
    return p;
  }

  // plan(), kept for a rank (exec::rank_keeps_plan) per (size, attempt, snapshot) while a fresh
  // one has its phases and host slots and the rule holds for its working memory.
  Plan steady_plan(int64_t h, int64_t w, const StreamState& state, const RunContext& ctx,
                   int attempt, bool snapshot) {
    Plan fresh = plan(h, w, state, ctx, attempt, snapshot);
    if (ctx.halo == nullptr) return fresh;
    // A retry: the plans kept for the earlier attempts at this size ran out of memory; the next
    // slice plans afresh.
    for (auto it = rank_plans_.begin(); attempt > 0 && it != rank_plans_.end();) {
      const bool failed = std::get<0>(it->first) == h && std::get<1>(it->first) == w &&
                          std::get<2>(it->first) < attempt;
      it = failed ? rank_plans_.erase(it) : std::next(it);
    }
    const auto key = std::make_tuple(h, w, attempt, snapshot && !ctx.first_slice);
    auto [it, added] = rank_plans_.try_emplace(key, fresh);
    const Plan& kept = it->second;
    bool roomy = kept.on_host == fresh.on_host && kept.starts == fresh.starts &&
                 kept.works.size() == fresh.works.size() &&
                 exec::rank_keeps_plan(kept.work, fresh.work);
    for (size_t k = 0; roomy && k < kept.works.size(); ++k) {
      roomy = exec::rank_keeps_plan(kept.works[k], fresh.works[k]);
    }
    if (!added && !roomy) it->second = fresh;
    Plan p = it->second;
    p.budget = fresh.budget, p.cap = fresh.cap, p.allocated = fresh.allocated;
    return p;
  }

  // The phased plan (Network::forward_phased), when the whole state does not fit: two phases
  // (the top level after the rest); three (the top level's first resnet apart) or four (the
  // level below the top apart, too) while a phase's state still does not fit. Between slices the
  // state waits in host memory (so the snapshot of the retry costs no device memory); each phase
  // needs only its own slots on the device:
  // - the first phase: its state beside a reserve of 5 frames of the widest activation, within
  //   `avail` (as plan(): its fixed transients, the upsamplers' unpacking, reach past its own
  //   frames);
  // - a later phase (one spooled frame at a time): its state beside one chunk's transients,
  //   counted exactly: its widest conv's time-padded buffer (3 frames) and one frame of output,
  //   and 1 GiB for cuDNN's workspace and the allocator, within `room` (the cap less what is
  //   allocated besides the state);
  // - a phase whose state does not fit sends its slots to host memory as plan() does (lowest
  //   resolution first, then execution order); working memory a third of what `avail` leaves
  //   beside the phase's state; a retry takes more phases, then halves the budgets (below).
  Plan phased_plan(int64_t h, int64_t w, int64_t avail, int64_t room, int attempt) const {
    const seedvr2::Tuning& tuning = net_->tuning();
    const std::vector<int> tries =
        tuning.phased > 0 ? std::vector<int>{tuning.phased + 1} : std::vector<int>{2, 3, 4};
    // Whether tries[n + 1] splits more finely than tries[n] (a network may have fewer levels).
    auto finer = [&](size_t n) {
      return n + 1 < tries.size() &&
             net_->phase_starts(tries[n + 1]).size() > net_->phase_starts(tries[n]).size();
    };
    // The first count tried: the most phases a call at this size needed after running out of
    // memory (PlanHistory). A retry takes the next count after the one that failed before it
    // halves the budgets (one more spool costs far less than host-resident state).
    size_t first = 0;
    const int least = history_->least_phases(h, w);
    while (int(net_->phase_starts(tries[first]).size()) < least && finer(first)) ++first;
    size_t chosen = 0;
    int halve = 0;
    Plan p = phased_plan_from(h, w, avail, room, tries, first, halve, chosen);
    for (int k = 0; k < attempt; ++k) {
      if (finer(chosen)) {
        first = chosen + 1;
      } else {
        ++halve;
      }
      p = phased_plan_from(h, w, avail, room, tries, first, halve, chosen);
    }
    return p;
  }

  // phased_plan() from tries[first] on (more phases only while a phase spills to host memory),
  // budgets halved `halve` times; `chosen`: the index into `tries` it took.
  Plan phased_plan_from(int64_t h, int64_t w, int64_t avail, int64_t room,
                        const std::vector<int>& tries, size_t first, int halve,
                        size_t& chosen) const {
    const seedvr2::Tuning& tuning = net_->tuning();
    constexpr int64_t kMostWork = int64_t(4) << 30, kLeastWork = int64_t(256) << 20;
    const int64_t slots = net_->state_slots();
    const int64_t elt = int64_t(c10::elementSize(dtype_));
    const std::vector<char> all;  // every slot
    Plan p;
    for (size_t n = first; n < tries.size(); ++n) {
      chosen = n;
      p = Plan{};
      p.starts = net_->phase_starts(tries[n]);
      p.on_host.assign(size_t(slots), tuning.host_state == 1 ? 1 : 0);
      bool spilled = false;
      for (size_t q = 0; q < p.starts.size(); ++q) {
        const size_t end = q + 1 < p.starts.size() ? p.starts[q + 1] : net_->stage_count();
        const std::vector<char> mine = net_->stage_slots(p.starts[q], end);
        const int64_t frame = net_->largest_frame_bytes(h, w, elt, q == 0 ? all : mine);
        const int64_t budget =
            std::max<int64_t>(q == 0 ? avail - 5 * frame : room - 4 * frame - (int64_t(1) << 30),
                              0) >>
            halve;
        if (tuning.host_state < 0) {
          const std::vector<char> host = net_->host_slots(h, w, elt, budget, mine);
          for (size_t k = 0; k < size_t(slots); ++k) {
            if (host[k]) {
              p.on_host[k] = 1;
              spilled = true;
            }
          }
        }
        int64_t device = 0;
        for (int k = 0; k < slots; ++k) {
          if (mine[size_t(k)] && !p.on_host[size_t(k)]) device += net_->slot_bytes(k, h, w, elt);
        }
        p.device_state = std::max(p.device_state, device);
        const int64_t work = tuning.work_mib > 0
                                 ? tuning.work_mib << 20
                                 : std::clamp<int64_t>((avail - device) / 3, kLeastWork, kMostWork);
        p.works.push_back(std::max<int64_t>(work >> halve, 1));
      }
      // More phases only when a phase spilled to host memory.
      if (!spilled || n + 1 == tries.size() ||
          net_->phase_starts(tries[n + 1]).size() <= p.starts.size()) {
        break;
      }
    }
    for (int k = 0; k < slots; ++k) {
      if (p.on_host[size_t(k)]) p.host_state += net_->slot_bytes(k, h, w, elt);
    }
    p.work = p.works.front();
    return p;
  }

  // The slice's input on the device: through the worker's pinned staging, or a plain copy.
  at::Tensor upload(Planar&& input, const RunContext& ctx) const {
    const at::MemoryFormat format = net_->memory_format();
    if (ctx.device) {
      const at::Tensor staged = ctx.device->input_stager(0).upload(input, device_);
      at::Tensor x =
          at::empty(staged.sizes(), staged.options().dtype(dtype_).memory_format(format));
      x.copy_(staged);
      return x;
    }
    return to_tensor(std::move(input)).to(device_, dtype_).contiguous(format);
  }

  // CUDA: the network over `x` in time chunks sized from the memory budget (plan()), each output
  // chunk handed to `emit` in order.
  void forward_cuda(const at::Tensor& x, StreamState& state, const RunContext& ctx, int attempt,
                    bool snapshot, const std::function<void(const at::Tensor&)>& emit) {
    const Plan p = steady_plan(x.size(3), x.size(4), state, ctx, attempt, snapshot);
    state.on_host = p.on_host;
    const bool phased = !p.starts.empty();
    // (A rank's plan is logged too: how it chunks decides how early its history moves on.)
    const bool rank = ctx.halo != nullptr;
    if (attempt > 0 || ((p.host_state > 0 || phased || rank) && ctx.first_slice)) {
      std::string works;
      for (int64_t b : p.works) works += (works.empty() ? "" : " / ") + std::to_string(b >> 20);
      if (works.empty()) works = std::to_string(p.work >> 20);
      log::info(
          kLogger,
          traits_.name + ": " +
              (phased ? "in " + std::to_string(p.starts.size()) + " phases, " : std::string()) +
              std::to_string(p.device_state >> 20) + " MiB of causal state on the device, " +
              std::to_string(p.host_state >> 20) + " MiB in host memory, " + works +
              " MiB of working memory per chunk (planned against " +
              std::to_string(p.budget >> 20) + " MiB for the state: a cap of " +
              std::to_string(p.cap >> 20) + " MiB, " + std::to_string(p.allocated >> 20) +
              " MiB allocated on the device, " + std::to_string(p.share) + " rank" +
              (p.share > 1 ? "s" : "") + " on it)");
    }
    if (phased) {
      forward_phased_ranges(x, state, ctx, p.starts, p.works, emit);
      if (attempt > 0) history_->ran_phases(x.size(3), x.size(4), int(p.starts.size()));
    } else {
      net_->forward_chunks(x, state, ctx.first_slice, p.work, emit);
    }
  }

  // CUDA: forward_cuda(); with a device worker decoded chunks leave through its output sink
  // (pinned, off this thread) while later chunks compute.
  Planar run_cuda(const at::Tensor& x, StreamState& state, const RunContext& ctx, int attempt,
                  bool snapshot) {
    auto forward = [&](const std::function<void(const at::Tensor&)>& emit) {
      forward_cuda(x, state, ctx, attempt, snapshot, emit);
    };
    if (net_->decoder() && ctx.device) {
      exec::OutputSink& sink = ctx.device->output_sink(0);
      const int64_t tf = net_->arch().temporal_factor(), T = x.size(2);
      const int64_t total = ctx.first_slice ? 1 + tf * (T - 1) : tf * T;
      const int64_t s = traits_.scale_num;
      const int64_t out_h = x.size(3) * s, out_w = x.size(4) * s;
      // The slice's output; or, for a rank of a split slice, the whole slice's output (which
      // the session made), from frame into_frame on. A rank taken deferred may return before
      // its last copies land: its worker goes on to the next slice meanwhile.
      Planar own;
      Planar* out = &own;
      const int64_t frame_base = ctx.into ? ctx.into_frame : 0;
      if (ctx.into) {
        out = ctx.into;
        if (out->channels != traits_.out_channels || out->width != out_w || out->height != out_h ||
            frame_base + total > out->frames) {
          throw ModelError(traits_.name + ": a rank's part does not fit the slice's output");
        }
        if (ctx.into_ready.valid()) sink.wait(ctx.into_ready);
      } else {
        sink.allocate(own, traits_.out_channels, int(total), int(out_h), int(out_w));
      }
      const bool defer = ctx.into && ctx.deferred;
      int64_t frame0 = 0;
      try {
        forward([&](const at::Tensor& y) {
          chunk_fault_point(y);
          if (frame0 + y.size(2) > total) {
            throw ModelError(traits_.name + ": decoder made more frames than expected");
          }
          at::Tensor planar = at::empty({y.size(1), y.size(2), y.size(3), y.size(4)},
                                        y.options().dtype(at::kFloat));
          planar.copy_(y.squeeze(0));
          sink.push(planar, *out, int(frame_base + frame0), 0, 0);
          frame0 += y.size(2);
        });
        if (!defer) sink.finish();
      } catch (...) {
        sink.abandon();
        throw;
      }
      if (frame0 != total) {
        sink.abandon();
        throw ModelError(traits_.name + ": decoder made " + std::to_string(frame0) +
                         " frames, expected " + std::to_string(total));
      }
      if (defer) {
        *ctx.deferred = [take = exec::deferred_output(std::make_shared<Planar>(), sink.mark()),
                         name = traits_.name] { return guarded(name.c_str(), take); };
      }
      return own;
    }
    std::vector<at::Tensor> parts;
    forward([&](const at::Tensor& y) {
      chunk_fault_point(y);
      parts.push_back(y);
    });
    at::Tensor y = parts.size() == 1 ? parts[0] : at::cat(parts, 2);
    if (!net_->decoder() && !logvar_) y = y.narrow(1, 0, net_->arch().latent_channels);
    return to_slice_output(to_planar(y), ctx);
  }
#endif

  // `x` as a new tensor of the session's device, dtype and memory format (the network may write
  // its input's buffer).
  at::Tensor fresh_copy(const at::Tensor& x) const {
    at::Tensor y = at::empty(
        x.sizes(), x.options().device(device_).dtype(dtype_).memory_format(net_->memory_format()));
    y.copy_(x);
    return y;
  }

  void check(const Planar& in, const RunContext& ctx) const {
    const ModelTraits& t = traits_;
    const std::string where = t.name + ": ";
    if (in.channels != t.in_channels) {
      throw ModelError(where + "input has " + std::to_string(in.channels) + " channels, expected " +
                       std::to_string(t.in_channels));
    }
    if (in.frames < 1 || in.height < 1 || in.width < 1) {
      throw ModelError(where + "empty input [" + std::to_string(in.channels) + ", " +
                       std::to_string(in.frames) + ", " + std::to_string(in.height) + ", " +
                       std::to_string(in.width) + "]");
    }
    if (!net_->decoder()) {
      const int s = t.size_multiple, g = t.frame_group;
      if (in.height % s != 0 || in.width % s != 0) {
        throw ModelError(where + "frame size " + std::to_string(in.width) + "x" +
                         std::to_string(in.height) + " is not a multiple of " + std::to_string(s));
      }
      if (ctx.first_slice && (in.frames - 1) % g != 0) {
        throw ModelError(where + "the first slice has " + std::to_string(in.frames) +
                         " frames; it needs 1 + " + std::to_string(g) +
                         "k (pad by repeating the last frame)");
      }
      if (!ctx.first_slice && in.frames % g != 0) {
        throw ModelError(where + "slice " + std::to_string(ctx.slice_index) + " has " +
                         std::to_string(in.frames) + " frames; later slices need a multiple of " +
                         std::to_string(g) +
                         " (the stride-2 time convolutions carry one frame between slices, which "
                         "is exact only on a window boundary)");
      }
    }
    if (!ctx.first_slice && !tiles_.count(ctx.tile_index) &&
        !(ctx.halo && ctx.halo->history_from() >= 0)) {
      throw ModelError(where + "slice " + std::to_string(ctx.slice_index) + " of tile " +
                       std::to_string(ctx.tile_index) +
                       " is not the first slice, but no earlier slice of it ran on this session");
    }
  }

  ModelTraits traits_;
  std::shared_ptr<const Network> net_;
  std::shared_ptr<PlanHistory> history_;  // the model's, for this device
  at::Device device_;
  at::ScalarType dtype_;
  bool logvar_;
  std::map<int, StreamState> tiles_;             // by RunContext::tile_index
  std::unique_ptr<exec::MemoryHold> host_hold_;  // its share of the host budget (phase_range)
  bool ranges_logged_ = false;
#ifdef WMBATCH_WITH_CUDA
  std::map<std::tuple<int64_t, int64_t, int, bool>, Plan> rank_plans_;  // steady_plan
#endif
};

class SeedVR2Model final : public Model {
 public:
  SeedVR2Model(const ModelConfig& config, bool decoder, const Architecture& arch,
               const Device& device, ParamMap params)
      : arch_(arch),
        decoder_(decoder),
        precision_(config.precision),
        logvar_(options_as<Seedvr2VaeOptions>(config).logvar && !decoder),
        tuning_(seedvr2::Tuning::parse(config.tuning)),
        params_(std::move(params)) {
    arch_.validate();
    ModelTraits& t = traits_;
    t.causal_state = true;
    t.halo_exact = false;
    t.precisions = {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16};
    const int s = arch_.spatial_factor();
    if (decoder_) {
      t.name = "seedvr2-vae decode";
      t.in_channels = arch_.latent_channels;
      t.out_channels = arch_.in_channels;
      t.scale_num = s;
      t.scale_den = 1;
      t.halo = kHaloLatent;
      t.sequence_parallel = true;
    } else {
      t.name = "seedvr2-vae encode";
      t.in_channels = arch_.in_channels;
      t.out_channels = arch_.latent_channels * (logvar_ ? 2 : 1);
      t.scale_num = 1;
      t.scale_den = s;
      t.size_multiple = s;
      t.halo = kHaloLatent * s;
      t.frame_group = arch_.temporal_factor();
      t.frame_offset = 1;
      // Ranks take whole temporal downsampling windows (a first slice's rank 0: 1 + 4k frames,
      // every other part 4k), which makes the time split exact as slices are.
      t.sequence_parallel = true;
    }
    network_for(device);  // weights on the main device now: errors surface at construction
  }

  const ModelTraits& traits() const override { return traits_; }
  int64_t output_frames(int64_t frames) const override {
    if (frames <= 0) return 0;
    const int64_t f = arch_.temporal_factor();
    return decoder_ ? 1 + f * (frames - 1) : 1 + (frames - 1) / f;
  }
  std::unique_ptr<ModelSession> open_session(const Device& device) const override {
    std::shared_ptr<PlanHistory> history;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::shared_ptr<PlanHistory>& slot = histories_[device.str()];
      if (!slot) slot = std::make_shared<PlanHistory>();
      history = slot;
    }
    return std::make_unique<SeedVR2Session>(traits_, network_for(device), std::move(history),
                                            to_device(device), dtype_for(device), logvar_);
  }

 private:
  at::ScalarType dtype_for(const Device& device) const {
    if (device.kind == Device::Kind::kCpu && precision_ == Precision::kFloat16) {
      throw ModelError("seedvr2-vae: fp16 is not supported on CPU (use fp32, or bf16)");
    }
    return to_scalar_type(precision_);
  }

  // One network per device, built on first use from the host parameters.
  std::shared_ptr<const Network> network_for(const Device& device) const {
    const at::ScalarType dtype = dtype_for(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = networks_[device.str()];
    if (!slot) {
      slot = guarded("seedvr2-vae: loading weights", [&] {
        c10::InferenceMode inference;
        const at::Device dev = to_device(device);
        if (device.kind == Device::Kind::kCuda) {
          // Asked before the weights' upload (as for wan2.1-vae): chunks of several sizes
          // fragment the allocator's fixed segments, growable ones do not; shapes repeat chunk
          // after chunk, so cuDNN times its algorithms once per shape; float32 runs are meant to
          // be exact (no TF32).
          exec::DeviceSettings settings;
          settings.growable_segments = true;
          settings.cudnn_benchmark = tuning_.cudnn_benchmark ? 1 : 0;
          settings.cudnn_benchmark_limit = tuning_.cudnn_benchmark_limit;
          settings.exact_float32_convs = settings.exact_float32_matmuls = dtype == at::kFloat;
          exec::device_layer().ask(settings);
        }
        // channels_last_3d is what cuDNN's fast 3-D convs want; on the CPU (oneDNN) the default
        // layout (as measured for wan2.1-vae).
        const at::MemoryFormat format = device.kind == Device::Kind::kCuda
                                            ? at::MemoryFormat::ChannelsLast3d
                                            : at::MemoryFormat::Contiguous;
        auto net = std::make_shared<const Network>(
            arch_, decoder_,
            [&](const std::string& key) {
              const at::Tensor t = params_.at(key).to(dev, dtype);
              return t.dim() == 5 ? t.contiguous(format) : t;
            },
            format, tuning_);
#ifdef WMBATCH_WITH_CUDA
        // Sessions run on their own streams: the weight uploads must be complete first.
        if (device.kind == Device::Kind::kCuda) c10::cuda::device_synchronize();
#endif
        return net;
      });
    }
    return slot;
  }

  Architecture arch_;
  bool decoder_;
  Precision precision_;
  bool logvar_;
  seedvr2::Tuning tuning_;
  ParamMap params_;  // host float32 master copy
  ModelTraits traits_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const Network>> networks_;
  mutable std::map<std::string, std::shared_ptr<PlanHistory>> histories_;  // per device
};

}  // namespace

std::unique_ptr<Model> make_seedvr2_vae(const ModelConfig& config, const Device& device) {
  const bool decoder = is_decoder(config);
  Architecture arch;
  ParamMap params =
      guarded("seedvr2-vae: reading weights", [&] { return load_params(config, decoder, arch); });
  return std::make_unique<SeedVR2Model>(config, decoder, arch, device, std::move(params));
}

std::unique_ptr<Model> make_seedvr2_vae_random(const ModelConfig& config,
                                               const seedvr2::Architecture& arch,
                                               const Device& device, uint64_t seed) {
  const bool decoder = is_decoder(config);
  arch.validate();
  ParamMap params =
      guarded("seedvr2-vae: random weights", [&] { return random_params(arch, decoder, seed); });
  return std::make_unique<SeedVR2Model>(config, decoder, arch, device, std::move(params));
}

}  // namespace wm::models
