#include "parallel/sequence_parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <string>
#include <utility>

#include "parallel/exchange_group.h"
#include "parallel/rank_fault.h"
#include "parallel/torch_side.h"
#include "src/base/error.h"
#include "src/base/log_text.h"
#include "src/exec/halo_exchange.h"

namespace wm::parallel {

std::vector<int> split_frames(int frames, int ranks) {
  const int n = std::max(1, std::min(frames, ranks));
  std::vector<int> out(size_t(n), frames / n);
  for (int i = 0; i < frames % n; ++i) out[size_t(n - 1 - i)] += 1;
  return out;
}

std::vector<int> split_frames_balanced(int frames, const std::vector<int64_t>& done) {
  const int n = std::max(1, std::min<int>(frames, int(done.size())));
  std::vector<int> out(size_t(n), frames / n);
  std::vector<int> order(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) order[size_t(r)] = n - 1 - r;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return done[size_t(a)] < done[size_t(b)]; });
  for (int i = 0; i < frames % n; ++i) out[size_t(order[size_t(i)])] += 1;
  return out;
}

SplitBy choose_split(int frames, int rows, int ranks, Device::Kind kind) {
  if (rows < 2 * ranks) return SplitBy::kTime;
  return frames < ranks || kind == Device::Kind::kCpu ? SplitBy::kRows : SplitBy::kTime;
}

void fit_to_model(SequenceParallelOptions& options, std::shared_ptr<const Model> model) {
  const ModelTraits& t = model->traits();
  options.costs = t.split_costs;
  if (t.split_inside_slices) {
    options.inside = true;
    options.by = SplitBy::kTime;
    return;
  }
  options.frame_group = std::max(1, t.frame_group);
  options.frame_offset = t.frame_group > 1 ? t.frame_offset : 0;
  options.output_shape = [model](int frames, int height, int width, bool first) {
    const ModelTraits& traits = model->traits();
    SliceShape s;
    s.channels = traits.out_channels;
    // A later slice yields what its frames add to a sequence that already holds one frame.
    s.frames = int(first ? model->output_frames(frames)
                         : model->output_frames(frames + 1) - model->output_frames(1));
    s.height = int(int64_t(height) * traits.scale_num / traits.scale_den);
    s.width = int(int64_t(width) * traits.scale_num / traits.scale_den);
    return s;
  };
}

namespace {

using Clock = std::chrono::steady_clock;

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

// `part` into `whole` (Planar's place()), or the error.
void place_part(const Planar& part, Planar& whole, int frame, int row) {
  if (!place(part, whole, frame, row)) {
    throw ModelError("sequence parallel: the ranks' outputs differ in shape");
  }
}

}  // namespace

struct SequenceParallelSession::Clocks {
  std::mutex mutex;
  std::vector<double> seconds;
};

// What a rank's call gave: its part (empty when it wrote into the slice's output) and, when it
// returned before its last copies landed, the function that waits for them.
struct SequenceParallelSession::RankPart {
  Planar part;
  std::function<Planar()> deferred;
};

// One slice (of one tile) queued on the ranks.
struct SequenceParallelSession::SliceRun {
  int64_t slice = 0;
  bool rows = false;
  std::vector<int> offsets;     // per rank: output frame (time) or row (rows) where its part starts
  std::shared_ptr<Planar> out;  // the slice's output, when the ranks write into it
  std::shared_future<void> out_ready;  // its memory made (beside the ranks' work)
  std::shared_ptr<ExchangeGroup> group;
  std::vector<Device> devices;
  std::vector<int> ranks;  // per part: the job's rank that runs it
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;
  std::vector<std::unique_ptr<exec::HaloExchange>> views;  // live until the ranks are done
  std::vector<std::unique_ptr<exec::HaloExchange>> faulty;
  std::vector<std::shared_future<std::shared_ptr<RankPart>>> parts;
  std::shared_ptr<std::atomic<int>> first_failure = std::make_shared<std::atomic<int>>(-1);
  std::mutex mutex;
  std::exception_ptr group_failure;  // the timeout's or the exchange's own error
};

SequenceParallelSession::SequenceParallelSession(std::vector<std::unique_ptr<ModelSession>> ranks,
                                                 std::vector<DeviceWorker*> workers,
                                                 SequenceParallelOptions options)
    : ranks_(std::move(ranks)),
      workers_(std::move(workers)),
      options_(std::move(options)),
      clocks_(std::make_shared<Clocks>()) {
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
  clocks_->seconds.assign(ranks_.size(), 0.0);
}

SequenceParallelSession::~SequenceParallelSession() {
  drain();
  try {
    pin_cpu_ranks(false);  // the workers outlive the session
  } catch (...) {
  }
}

void SequenceParallelSession::pin_cpu_ranks(bool pin) {
  if (pin == pinned_ || !options_.pin_cpu || ranks() < 2) return;
  for (const DeviceWorker* w : workers_) {
    if (w->device().kind != Device::Kind::kCpu) return;
  }
  const int n = ranks();
  std::string where;
  for (int r = 0; r < n; ++r) {
    const int t = workers_[size_t(r)]->call_uncounted(
        [&] { return torch_devices().pin_cpu_rank(pin ? r : -1, n); });
    if (pin && t == 0) break;  // more threads than CPUs: nothing pinned
    if (pin) where += (r ? ", " : "") + std::to_string(t) + " CPUs";
  }
  pinned_ = pin && !where.empty();
  if (pinned_)
    log::info("parallel", std::to_string(n) + " CPU ranks on cores of their own: " + where);
}

void SequenceParallelSession::decide_solo(int height, int width) {
  const std::pair<int, int> shape(height, width);
  if (solo_decided_ && shape == solo_shape_) return;
  drain();  // the ranks' sessions are asked with nothing of theirs in flight
  solo_decided_ = true;
  solo_shape_ = shape;
  solo_ = false;
  std::string why;
  for (int r = 0; r < ranks() && !solo_; ++r) {
    const Device device = workers_[size_t(r)]->device();
    int sharing = 0;
    for (const DeviceWorker* w : workers_) sharing += w->device().str() == device.str() ? 1 : 0;
    if (!ranks_[size_t(r)]->rank_holds_state(height, width, sharing,
                                             workers_[size_t(r)]->context())) {
      solo_ = true;
      why = "rank " + std::to_string(options_.first_rank + r) + " on " + device.str() +
            (sharing > 1 ? " (one of " + std::to_string(sharing) + " ranks there)" : "");
    }
  }
  if (solo_) {
    log::info("parallel", "time split of " + std::to_string(height) + "x" + std::to_string(width) +
                              " slices: " + why +
                              " cannot hold its causal state on the device; the sequence runs "
                              "on rank " +
                              std::to_string(options_.first_rank) + " alone, as one device");
  }
}

std::vector<double> SequenceParallelSession::rank_seconds() const {
  std::lock_guard<std::mutex> lock(clocks_->mutex);
  return clocks_->seconds;
}

void SequenceParallelSession::wait_ranks(SliceRun& run) {
  // A rank that does not finish in time (a peer's device work hung) aborts the exchange, which
  // ends the waits, so the others return too; the slice fails with the timeout's error. So does
  // an error the exchange reports while the ranks compute (NCCL: a communicator's async error).
  for (size_t r = 0; r < run.parts.size(); ++r) {
    bool aborted = false;
    while (!aborted &&
           run.parts[r].wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      {
        std::lock_guard<std::mutex> lock(run.mutex);
        if (run.group_failure) break;
      }
      const std::string sick = run.group->health();
      const bool late = Clock::now() >= run.deadline;
      if (sick.empty() && !late) continue;
      int none = -1;
      run.first_failure->compare_exchange_strong(none, int(r));
      // Which rank hung cannot be told from here (its peers wait on it): name the first one
      // still running and the group.
      const int active = int(run.parts.size());
      const std::string who = active == 1 ? "rank " + std::to_string(run.ranks.front())
                                          : "ranks " + std::to_string(run.ranks.front()) + "-" +
                                                std::to_string(run.ranks.front() + active - 1);
      const std::string why =
          "sequence-parallel slice " + std::to_string(run.slice) + ": " +
          (!sick.empty() ? sick
                         : who + " did not finish within " + seconds_text(run.timeout) + " (rank " +
                               std::to_string(run.ranks[r]) + " on " + run.devices[r].str() +
                               " still running)") +
          "; the exchange was aborted";
      {
        std::lock_guard<std::mutex> lock(run.mutex);
        if (!run.group_failure)
          run.group_failure = std::make_exception_ptr(Error(why, kExitFailure));
      }
      run.group->abort(why);
      aborted = true;
    }
    // After an abort the ranks' exchange calls fail; a rank stuck outside the exchange (a hung
    // CUDA call) cannot be freed, and this waits for it.
    run.parts[r].wait();
  }
}

std::exception_ptr SequenceParallelSession::failure_of(SliceRun& run) {
  wait_ranks(run);
  {
    std::lock_guard<std::mutex> lock(run.mutex);
    if (run.group_failure) return run.group_failure;
  }
  const size_t n = run.parts.size();
  std::vector<std::exception_ptr> failures(n);
  for (size_t r = 0; r < n; ++r) {
    try {
      run.parts[r].get();
    } catch (...) {
      failures[r] = std::current_exception();
    }
  }
  // The rank that failed first (the others' errors are the abort's echo).
  const int cause = run.first_failure->load();
  if (cause >= 0 && size_t(cause) < n && failures[size_t(cause)]) return failures[size_t(cause)];
  for (const std::exception_ptr& f : failures) {
    if (f) return f;
  }
  return nullptr;
}

Planar SequenceParallelSession::take(SliceRun& run) {
  if (std::exception_ptr failure = failure_of(run)) std::rethrow_exception(failure);
  const size_t n = run.parts.size();
  std::vector<std::shared_ptr<RankPart>> parts(n);
  for (size_t r = 0; r < n; ++r) {
    parts[r] = run.parts[r].get();
    // Its last copies (it returned before they landed).
    if (parts[r]->deferred) {
      try {
        parts[r]->part = std::exchange(parts[r]->deferred, nullptr)();
      } catch (...) {
        rethrow_rank_failure(std::current_exception(), run.ranks[r], run.devices[r], run.slice);
      }
    }
  }
  if (run.out) {
    run.out_ready.get();  // rethrows what allocating it hit
    // The ranks wrote into it; one that could not returned its part.
    for (size_t r = 0; r < n; ++r) {
      if (parts[r]->part.empty()) continue;
      place_part(parts[r]->part, *run.out, run.rows ? 0 : run.offsets[r],
                 run.rows ? run.offsets[r] : 0);
      parts[r]->part = Planar();
    }
    Planar out = std::move(*run.out);
    return out;
  }
  if (n == 1) return std::move(parts[0]->part);
  const Planar& head = parts[0]->part;
  int frames = 0, height = 0;
  for (const auto& p : parts) {
    if (p->part.channels != head.channels || p->part.width != head.width ||
        (run.rows ? p->part.frames != head.frames : p->part.height != head.height)) {
      throw ModelError("sequence parallel: the ranks' outputs differ in shape");
    }
    frames += p->part.frames;
    height += p->part.height;
  }
  Planar out(head.channels, run.rows ? head.frames : frames, run.rows ? height : head.height,
             head.width);
  int at = 0;
  for (const auto& p : parts) {
    place_part(p->part, out, run.rows ? 0 : at, run.rows ? at : 0);
    at += run.rows ? p->part.height : p->part.frames;
  }
  return out;
}

void SequenceParallelSession::drain() {
  for (const std::shared_ptr<SliceRun>& run : in_flight_) wait_ranks(*run);
  in_flight_.clear();
}

Planar SequenceParallelSession::run(Planar&& input, const RunContext& ctx) {
  // Time (frames) or rows; auto: chosen at the sequence's (tile's) first slice, kept after.
  SplitBy by = options_.by;
  if (by == SplitBy::kAuto) {
    auto it = chosen_.find(ctx.tile_index);
    if (ctx.first_slice || it == chosen_.end()) {
      SliceFacts facts;
      facts.frames = input.frames;
      facts.rows = input.height;
      facts.cols = input.width;
      facts.first = ctx.first_slice;
      facts.last = ctx.last_slice;
      facts.ranks = ranks();
      facts.kind = workers_.front()->device().kind;
      facts.shared_device = true;
      for (const DeviceWorker* w : workers_) {
        facts.shared_device =
            facts.shared_device && w->device().str() == workers_[0]->device().str();
      }
      prediction_ = predict_split(facts, options_.costs);
      predicted_ = true;
      if (ctx.tile_index == 0) log::info("parallel", "auto split: " + prediction_.why);
      it = chosen_
               .insert_or_assign(ctx.tile_index, prediction_.rows ? SplitBy::kRows : SplitBy::kTime)
               .first;
    }
    by = it->second;
  }
  const bool rows = by == SplitBy::kRows;

  // A failed exchange broke the sequence it served: it cannot go on, a new one starts afresh.
  // So does a sequence that stopped without its last slice (its last rank's history may wait
  // for a rank 0 that will never take it).
  bool fresh = !begun_;
  if (begun_ && group_->failed()) {
    // The failing slice's own error, when it is still in flight (its caller may not have taken
    // it yet): a later slice must not report the abort's echo instead.
    std::exception_ptr failure;
    for (const std::shared_ptr<SliceRun>& r : in_flight_) {
      if (!failure) failure = failure_of(*r);
    }
    drain();
    if (!ctx.first_slice) {
      if (failure) std::rethrow_exception(failure);
      throw ModelError("sequence parallel: slice " + std::to_string(ctx.slice_index) +
                           " follows a slice of its sequence that failed",
                       kExitFailure);
    }
    fresh = true;
  }
  if (ctx.first_slice && ctx.tile_index == 0) {
    for (const auto& [tile, ring] : ring_) fresh = fresh || (!ring.ended && ring.last >= 0);
  }
  if (fresh) {
    drain();
    pin_cpu_ranks(true);
    group_->begin(ranks());
    ring_.clear();
    begun_ = true;
  }

  // A time split whose ranks cannot hold their causal state (their share of a device too
  // small): the sequence runs on rank 0 alone, as one device (decided at its first slice).
  if (ctx.first_slice && ctx.tile_index == 0) {
    if (!rows && !options_.inside) {
      decide_solo(input.height, input.width);
    } else {
      solo_ = solo_decided_ = false;  // a sequence split by rows: ask again at the next in time
    }
  }
  const bool solo = !rows && !options_.inside && solo_;
  last_split_ = by;
  (rows ? row_slices_ : time_slices_) += 1;
  solo_slices_ += solo ? 1 : 0;

  // The runs: latent rows per band, or input frames per rank (whole groups of frame_group).
  std::vector<int> runs;
  if (options_.inside) {
    runs.assign(size_t(ranks()), input.frames);  // each rank: the whole slice
  } else if (rows) {
    runs = options_.bands.empty() ? split_frames(input.height, ranks())
                                  : fit_split(options_.bands, input.height);
  } else {
    const int g = std::max(1, options_.frame_group);
    const int head = ctx.first_slice ? std::min(options_.frame_offset, input.frames) : 0;
    const int units = g > 1 ? (input.frames - head) / g : input.frames;
    if (g > 1 && head + units * g != input.frames) {
      throw ModelError("sequence parallel: slice " + std::to_string(ctx.slice_index) + " has " +
                       std::to_string(input.frames) + " frames, not " +
                       (head ? std::to_string(head) + " + " : std::string()) + "a multiple of " +
                       std::to_string(g));
    }
    if (units == 0 || options_.whole_slices || solo) {
      runs = {input.frames};
    } else {
      std::vector<int64_t>& done = done_[ctx.tile_index];
      if (ctx.first_slice || done.size() != size_t(ranks())) done.assign(size_t(ranks()), 0);
      runs = options_.split.empty() ? split_frames_balanced(units, done)
                                    : fit_split(options_.split, units);
      for (int& n : runs) n *= g;
      runs.front() += head;
      // What each rank yields of this slice (output frames when the model says, else input).
      for (size_t r = 0; r < runs.size(); ++r) {
        const bool head_part = ctx.first_slice && r == 0;
        done[r] += options_.output_shape
                       ? options_.output_shape(runs[r], input.height, input.width, head_part).frames
                       : runs[r];
      }
    }
  }
  if (int(runs.size()) > ranks()) {
    // More runs asked for than ranks: the rest to the last.
    for (size_t i = size_t(ranks()); i < runs.size(); ++i) runs[size_t(ranks()) - 1] += runs[i];
    runs.resize(size_t(ranks()));
  }
  const int active = int(runs.size());

  // The ring (time split): the slice's first rank (`base`: rank 0, or with whole slices the
  // next in turn) takes its history from the last rank of the previous slice; this slice's last
  // rank hands its own to the next slice's first rank when another slice follows. The slice's
  // parts run on ranks base, base + 1, … (whole slices: one part, so the model's rank 0 of the
  // slice is worker `base`; otherwise base is 0).
  const bool follows = !ctx.last_slice;
  const int P = ranks();
  int from0 = -1, base = 0, next = 0;
  if (!rows && !options_.inside) {
    Ring& ring = ring_[ctx.tile_index];
    if (ctx.first_slice) {
      ring = Ring{};
    } else if (ring.ended) {
      throw ModelError("sequence parallel: slice " + std::to_string(ctx.slice_index) + " of tile " +
                           std::to_string(ctx.tile_index) + " follows its sequence's last slice",
                       kExitSoftware);
    }
    const bool turns = options_.whole_slices && !solo;
    base = turns ? ring.next : 0;
    const int last = (base + active - 1) % P;
    next = turns ? (last + 1) % P : 0;
    from0 = ring.last;
    ring.last = follows && last != next ? last : -1;
    ring.next = next;
    ring.ended = ctx.last_slice;
  }
  auto worker_of = [&](int r) { return (base + r) % P; };

  // At most two slices of each tile in flight: a rank starts slice k + 1 while later ranks still
  // finish slice k, and no further ahead (whole slices: one per rank and the next one queued).
  const size_t per_tile = options_.whole_slices && !rows ? size_t(P) + 1 : 2;
  const size_t limit = per_tile * size_t(std::max(1, ctx.tiles));
  while (!in_flight_.empty() && in_flight_.size() >= limit) {
    wait_ranks(*in_flight_.front());
    in_flight_.pop_front();
  }

  auto run = std::make_shared<SliceRun>();
  run->slice = ctx.slice_index;
  run->rows = rows;
  run->group = group_;
  run->timeout = options_.timeout;
  run->deadline = Clock::now() + options_.timeout;
  const bool exchange = ranks() > 1 && !solo && (!rows || active > 1);
  // Where each part's output starts, in output frames (time) or rows.
  run->offsets.assign(size_t(active), 0);
  std::vector<int> part_frames(size_t(active), -1);  // output frames per part, when known
  if (options_.output_shape && !options_.inside) {
    int start = 0;
    for (int r = 0; r < active; ++r) {
      const int n = runs[size_t(r)];
      if (rows) {
        run->offsets[size_t(r)] =
            start == 0
                ? 0
                : options_.output_shape(input.frames, start, input.width, ctx.first_slice).height;
        part_frames[size_t(r)] =
            options_.output_shape(input.frames, n, input.width, ctx.first_slice).frames;
      } else {
        const bool head = ctx.first_slice && r == 0;
        run->offsets[size_t(r)] =
            start == 0
                ? 0
                : options_.output_shape(start, input.height, input.width, ctx.first_slice).frames;
        part_frames[size_t(r)] = options_.output_shape(n, input.height, input.width, head).frames;
      }
      start += n;
    }
    if (exchange) {
      const SliceShape s =
          options_.output_shape(input.frames, input.height, input.width, ctx.first_slice);
      // Its sizes now, its memory on a thread of its own: zero-filling hundreds of MB (a 720p
      // slice: 354 MB, ~180 ms on the GPU host) held back every rank's start by that much. The
      // ranks' writers wait for it (RunContext::into_ready), not their launching.
      auto out = std::make_shared<Planar>();
      out->channels = s.channels, out->frames = s.frames, out->height = s.height,
      out->width = s.width;
      const size_t values =
          size_t(s.channels) * size_t(s.frames) * size_t(s.height) * size_t(s.width);
      run->out = out;
      run->out_ready =
          std::async(std::launch::async, [out, values] { out->data = PlanarData(values); }).share();
    }
  }

  const std::chrono::milliseconds timeout = options_.timeout;
  Fault* fault = options_.fault && options_.fault->spec().armed() ? options_.fault : nullptr;
  const bool serial = options_.serial;
  int first = 0;
  for (int r = 0; r < active; ++r) {
    const int w = worker_of(r);
    const int job_rank = options_.first_rank + w;
    DeviceWorker* worker = workers_[size_t(w)];
    const Device device = worker->device();
    run->devices.push_back(device);
    run->ranks.push_back(job_rank);
    RunContext rc = ctx;
    rc.deferred = nullptr;  // the ranks' parts are taken here
    // A band holds every frame of the slice; a run of frames, its part of them.
    rc.first_slice = ctx.first_slice && (rows || options_.inside || r == 0);
    rc.padded_frames = rows || options_.inside || r == active - 1 ? ctx.padded_frames : 0;
    rc.device = worker->context();
    rc.halo = nullptr;
    rc.halo_rows = false;
    rc.into = nullptr;
    // Ranks busy on this device at once: the slice's, or with whole slices every rank.
    rc.device_ranks = 0;
    const int busy = options_.whole_slices && !rows && !solo ? P : active;
    for (int q = 0; q < busy; ++q) {
      rc.device_ranks += workers_[size_t(worker_of(q))]->device().str() == device.str() ? 1 : 0;
    }
    if (exchange) {
      // (Inside a slice messages go between any two ranks: the group's own views.)
      exec::HaloExchange& inner = rows || options_.inside ? group_->rank(w) : group_->pipelined(w);
      const int from = rows ? -1 : r > 0 ? worker_of(r - 1) : from0;
      const int to = rows                                       ? -1
                     : r + 1 < active                           ? worker_of(r + 1)
                     : follows && w != next && !options_.inside ? next
                                                                : -1;
      run->views.push_back(std::make_unique<exec::SliceExchange>(inner, r, active, from, to));
      rc.halo = run->views.back().get();
      rc.halo_rows = rows;
      // The fault (tests) fires inside the model, at the rank's first exchange of the slice.
      if (fault) {
        run->faulty.push_back(
            faulty_exchange(*rc.halo, *fault, job_rank, ctx.slice_index, *group_, timeout));
        rc.halo = run->faulty.back().get();
      }
      if (run->out) {
        rc.into = run->out.get();
        rc.into_ready = run->out_ready;
        rc.into_frame = rows ? 0 : run->offsets[size_t(r)];
        rc.into_row = rows ? run->offsets[size_t(r)] : 0;
      }
    }
    Planar part = active == 1       ? std::move(input)
                  : options_.inside ? input.clone()
                  : rows            ? rows_of(input, first, runs[size_t(r)])
                                    : frames_of(input, first, runs[size_t(r)]);
    if (!options_.inside) first += runs[size_t(r)];
    ModelSession* session = ranks_[size_t(w)].get();
    ExchangeGroup* group = group_.get();
    const bool solo_fault = fault && !rc.halo;
    const int counted = part_frames[size_t(r)];
    run->parts.push_back(
        worker
            ->submit(
                [session, group, r, w, job_rank, device, rc, first_failure = run->first_failure,
                 fault, solo_fault, timeout, worker, serial, counted, clocks = clocks_,
                 part = std::make_shared<Planar>(std::move(part))]() -> std::shared_ptr<RankPart> {
                  const Clock::time_point start = Clock::now();
                  try {
                    if (solo_fault && fault->fires(job_rank, rc.slice_index)) {
                      fault->raise(job_rank, rc.slice_index, group, timeout);
                    }
                    auto result = std::make_shared<RankPart>();
                    RunContext call = rc;
                    // A rank that writes into the slice's output, or that runs the slice
                    // alone and whose output frames are known beforehand (the meter's count),
                    // may return before its last copies land (its worker goes on to the next
                    // slice); not when measuring.
                    const bool later = rc.into || (!rc.halo && counted >= 0);
                    call.deferred = later && !serial ? &result->deferred : nullptr;
                    result->part = session->run(std::move(*part), call);
                    if (rc.tile_index == 0) {
                      worker->add_frames(counted >= 0 ? counted : result->part.frames);
                    }
                    const double seconds =
                        std::chrono::duration<double>(Clock::now() - start).count();
                    std::lock_guard<std::mutex> lock(clocks->mutex);
                    clocks->seconds[size_t(w)] += seconds;
                    return result;
                  } catch (...) {
                    std::exception_ptr failure;
                    std::string what = "failed";
                    try {
                      rethrow_rank_failure(std::current_exception(), job_rank, device,
                                           rc.slice_index);
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
                })
            .share());
    // Measuring: each rank alone on its device (the ones before it are done, so whatever it
    // receives is there).
    if (serial) run->parts.back().wait();
  }
  input = Planar();
  in_flight_.push_back(run);
  if (ctx.deferred && !serial) {
    *ctx.deferred = [run] { return take(*run); };
    return Planar();
  }
  return take(*run);
}

}  // namespace wm::parallel
