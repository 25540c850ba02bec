#include "parallel/sequence_parallel.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <string>
#include <utility>

#include "parallel/exchange_group.h"
#include "parallel/rank_fault.h"
#include "parallel/torch_side.h"
#include "src/base/error.h"
#include "src/exec/halo_exchange.h"

namespace wm::parallel {

std::vector<int> split_frames(int frames, int ranks) {
  const int n = std::max(1, std::min(frames, ranks));
  std::vector<int> out(size_t(n), frames / n);
  for (int i = 0; i < frames % n; ++i) out[size_t(n - 1 - i)] += 1;
  return out;
}

SplitBy choose_split(int frames, int rows, int ranks, Device::Kind kind) {
  if (rows < 2 * ranks) return SplitBy::kTime;
  return frames < ranks || kind == Device::Kind::kCpu ? SplitBy::kRows : SplitBy::kTime;
}

namespace {

std::vector<int> fit_split(const std::vector<int>& asked, int frames) {
  std::vector<int> out;
  int left = frames;
  for (int n : asked) {
    if (left == 0) break;
    const int take = std::min(std::max(n, 1), left);
    out.push_back(take);
    left -= take;
  }
  if (left > 0) out.back() += left;
  return out;
}

// "2 s", "0.5 s".
std::string seconds_text(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0) return std::to_string(t.count() / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", double(t.count()) / 1000.0);
  return buf;
}

// Frames [first, first + n) of `in`.
Planar frames_of(const Planar& in, int first, int n) {
  Planar out(in.channels, n, in.height, in.width);
  for (int c = 0; c < in.channels; ++c) {
    std::memcpy(out.plane(c, 0), in.plane(c, first), size_t(n) * in.plane_size() * sizeof(float));
  }
  return out;
}

// Rows [top, top + n) of every frame of `in`.
Planar rows_of(const Planar& in, int top, int n) {
  Planar out(in.channels, in.frames, n, in.width);
  const size_t row = size_t(in.width);
  for (int c = 0; c < in.channels; ++c) {
    for (int t = 0; t < in.frames; ++t) {
      std::memcpy(out.plane(c, t), in.plane(c, t) + size_t(top) * row,
                  size_t(n) * row * sizeof(float));
    }
  }
  return out;
}

// The ranks' bands (every frame each), top to bottom, as whole frames.
Planar gather_rows(const std::vector<Planar>& bands) {
  const Planar& head = bands.front();
  int height = 0;
  for (const Planar& p : bands) {
    if (p.channels != head.channels || p.frames != head.frames || p.width != head.width) {
      throw ModelError("spatial parallel: the ranks' outputs differ in shape");
    }
    height += p.height;
  }
  Planar out(head.channels, head.frames, height, head.width);
  const size_t row = size_t(head.width);
  int top = 0;
  for (const Planar& p : bands) {
    for (int c = 0; c < p.channels; ++c) {
      for (int t = 0; t < p.frames; ++t) {
        std::memcpy(out.plane(c, t) + size_t(top) * row, p.plane(c, t),
                    size_t(p.height) * row * sizeof(float));
      }
    }
    top += p.height;
  }
  return out;
}

}  // namespace

SequenceParallelSession::SequenceParallelSession(std::vector<std::unique_ptr<ModelSession>> ranks,
                                                 std::vector<DeviceWorker*> workers,
                                                 SequenceParallelOptions options)
    : ranks_(std::move(ranks)), workers_(std::move(workers)), options_(std::move(options)) {
  if (ranks_.empty() || ranks_.size() != workers_.size()) {
    throw Error("sequence parallel: " + std::to_string(ranks_.size()) + " sessions for " +
                    std::to_string(workers_.size()) + " workers",
                kExitSoftware);
  }
  if (options_.nccl) {
    std::vector<int> devices;
    for (const DeviceWorker* w : workers_) {
      if (w->device().kind != Device::Kind::kCuda) {
        throw Error("sequence parallel: the NCCL exchange needs a GPU per rank", kExitDataErr);
      }
      devices.push_back(w->device().index);
    }
    group_ = torch_devices().nccl_group(devices, options_.timeout);
  } else {
    group_ = torch_devices().inprocess_group(int(ranks_.size()), options_.timeout);
  }
}

SequenceParallelSession::~SequenceParallelSession() = default;

Planar SequenceParallelSession::run(Planar&& input, const RunContext& ctx) {
  // Time (frames) or rows; auto: chosen at the sequence's (tile's) first slice, kept after.
  SplitBy by = options_.by;
  if (by == SplitBy::kAuto) {
    auto it = chosen_.find(ctx.tile_index);
    if (ctx.first_slice || it == chosen_.end()) {
      it = chosen_
               .insert_or_assign(ctx.tile_index, choose_split(input.frames, input.height, ranks(),
                                                              workers_.front()->device().kind))
               .first;
    }
    by = it->second;
  }
  last_split_ = by;
  const bool rows = by == SplitBy::kRows;
  (rows ? row_slices_ : time_slices_) += 1;
  const int length = rows ? input.height : input.frames;
  const std::vector<int>& asked = rows ? options_.bands : options_.split;
  const std::vector<int> counts =
      asked.empty() ? split_frames(length, ranks()) : fit_split(asked, length);
  const int active = std::min(int(counts.size()), ranks());
  std::vector<int> runs(counts.begin(), counts.begin() + active);
  int assigned = 0;
  for (int n : runs) assigned += n;
  runs.back() += length - assigned;  // more runs asked for than ranks: the rest to the last

  group_->begin(active);
  // The rank that failed first (the others' errors are the abort's echo).
  auto first_failure = std::make_shared<std::atomic<int>>(-1);
  std::vector<std::future<Planar>> results;
  int first = 0;
  const std::chrono::milliseconds timeout = options_.timeout;
  Fault* fault = options_.fault && options_.fault->spec().armed() ? options_.fault : nullptr;
  for (int r = 0; r < active; ++r) {
    const int job_rank = options_.first_rank + r;
    RunContext rc = ctx;
    rc.deferred = nullptr;  // the ranks' parts are gathered here
    // A band holds every frame of the slice; a run of frames, its part of them.
    rc.first_slice = ctx.first_slice && (rows || r == 0);
    rc.padded_frames = rows || r == active - 1 ? ctx.padded_frames : 0;
    rc.device = workers_[size_t(r)]->context();
    rc.halo = active > 1 ? &group_->rank(r) : nullptr;
    rc.halo_rows = rows && rc.halo;
    // The fault (tests) fires inside the model, at the rank's first exchange of the slice.
    std::shared_ptr<exec::HaloExchange> faulty;
    if (fault && rc.halo) {
      faulty = faulty_exchange(*rc.halo, *fault, job_rank, ctx.slice_index, *group_, timeout);
      rc.halo = faulty.get();
    }
    Planar part = active == 1 ? std::move(input)
                  : rows      ? rows_of(input, first, runs[size_t(r)])
                              : frames_of(input, first, runs[size_t(r)]);
    first += runs[size_t(r)];
    ModelSession* session = ranks_[size_t(r)].get();
    ExchangeGroup* group = group_.get();
    const Device device = workers_[size_t(r)]->device();
    const bool solo_fault = fault && !rc.halo;
    results.push_back(
        workers_[size_t(r)]->submit([session, group, r, job_rank, device, rc, first_failure, faulty,
                                     fault, solo_fault, timeout, worker = workers_[size_t(r)],
                                     part = std::make_shared<Planar>(std::move(part))]() -> Planar {
          try {
            if (solo_fault && fault->fires(job_rank, rc.slice_index)) {
              fault->raise(job_rank, rc.slice_index, group, timeout);
            }
            Planar out = session->run(std::move(*part), rc);
            if (rc.tile_index == 0) worker->add_frames(out.frames);
            return out;
          } catch (...) {
            std::exception_ptr failure;
            std::string what = "failed";
            try {
              rethrow_rank_failure(std::current_exception(), job_rank, device, rc.slice_index);
            } catch (const std::exception& e) {
              failure = std::current_exception();
              what = e.what();
            }
            int none = -1;
            first_failure->compare_exchange_strong(none, r);
            // The other ranks may wait for this one's messages: let them fail now.
            group->abort("rank " + std::to_string(job_rank) + " failed: " + what);
            std::rethrow_exception(failure);
          }
        }));
  }
  input = Planar();

  // A rank that does not finish in time (a peer's device work hung) aborts the exchange, which
  // ends the waits, so the others return too; the slice fails with the timeout's error. So does
  // an error the exchange reports while the ranks compute (NCCL: a communicator's async error).
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::exception_ptr group_failure;
  for (size_t r = 0; r < results.size() && !group_failure; ++r) {
    while (results[r].wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      const std::string sick = group_->health();
      const bool late = std::chrono::steady_clock::now() >= deadline;
      if (sick.empty() && !late) continue;
      int none = -1;
      first_failure->compare_exchange_strong(none, int(r));
      // Which rank hung cannot be told from here (its peers wait on it): name the first one
      // still running and the group.
      const int r0 = options_.first_rank;
      const std::string why =
          "sequence-parallel slice " + std::to_string(ctx.slice_index) + ": " +
          (!sick.empty() ? sick
                         : "ranks " + std::to_string(r0) + "-" + std::to_string(r0 + active - 1) +
                               " did not finish within " + seconds_text(timeout) + " (rank " +
                               std::to_string(r0 + int(r)) + " on " + workers_[r]->device().str() +
                               " still running)") +
          "; the exchange was aborted";
      group_failure = std::make_exception_ptr(Error(why, kExitFailure));
      group_->abort(why);
      break;
    }
  }
  std::vector<Planar> outputs;
  std::vector<std::exception_ptr> failures(results.size());
  for (size_t r = 0; r < results.size(); ++r) {
    try {
      outputs.push_back(results[r].get());
    } catch (...) {
      failures[r] = std::current_exception();
      outputs.emplace_back();
    }
  }
  if (group_failure) std::rethrow_exception(group_failure);
  const int cause = first_failure->load();
  if (cause >= 0 && failures[size_t(cause)]) std::rethrow_exception(failures[size_t(cause)]);
  for (const std::exception_ptr& f : failures) {
    if (f) std::rethrow_exception(f);
  }
  if (active == 1) return std::move(outputs.front());
  if (rows) return gather_rows(outputs);

  int total = 0;
  for (const Planar& p : outputs) total += p.frames;
  const Planar& head = outputs.front();
  Planar out(head.channels, total, head.height, head.width);
  int at = 0;
  for (const Planar& p : outputs) {
    if (p.channels != out.channels || p.height != out.height || p.width != out.width) {
      throw ModelError("sequence parallel: the ranks' outputs differ in shape");
    }
    for (int c = 0; c < p.channels; ++c) {
      std::memcpy(out.plane(c, at), p.plane(c, 0),
                  size_t(p.frames) * p.plane_size() * sizeof(float));
    }
    at += p.frames;
  }
  return out;
}

}  // namespace wm::parallel
