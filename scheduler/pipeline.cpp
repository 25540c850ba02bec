#include "scheduler/pipeline.h"

#include <tbb/flow_graph.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "parallel/device_worker.h"
#include "parallel/model_thread.h"
#include "parallel/placed_session.h"
#include "src/base/error.h"

namespace wm::sched {
namespace {

namespace flow = tbb::flow;

using WorkPtr = std::shared_ptr<SliceWork>;
using ResultPtr = std::shared_ptr<SliceResult>;

struct TileJob {
  WorkPtr slice;  // keeps the slice's metadata (and input, while tiles are cut) alive
  int tile = 0;
  Planar input;   // the tile's window
  Planar output;  // filled by a worker
  // Or, when the session returned it deferred (RunContext::deferred), this gives it: the worker
  // goes on to the next slice while this one's last chunks still copy.
  std::function<Planar()> deferred;
};
using TilePtr = std::shared_ptr<TileJob>;

// The model stage's dispatcher, behind the graph's async node: tiles wait in arrival order for
// a free session; each call runs on its session's device worker (a placed session, which waits
// for its ranks' own workers, on a waiter thread of its own), and its tile re-enters the graph
// through the node's gateway from there, so no TBB thread waits on a device. The node is serial
// (its body only queues), which keeps the tiles in the order the tiler made them; one session
// (a model with causal state) then runs them one after another in that order.
class ModelStage {
 public:
  using Node = flow::async_node<TilePtr, TilePtr>;
  // run(job, session index) makes the call; it runs on the session's worker or waiter thread.
  using Run = std::function<void(TileJob& job, int session)>;

  // `context`: the graph's (cancelled when a stage fails or the job is interrupted).
  ModelStage(tbb::task_group_context& context, std::vector<parallel::DeviceWorker*> workers,
             const std::vector<bool>& placed, Run run)
      : context_(context), workers_(std::move(workers)), run_(std::move(run)) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      free_.push_back(int(workers_.size() - 1 - i));  // session 0 first
      waiters_.emplace_back(placed[i] ? std::make_unique<parallel::ModelThread>("wm-placed")
                                      : nullptr);
    }
  }
  ~ModelStage() { drain(); }

  // The node's body: the tile waits for a session (the gateway holds the graph open meanwhile).
  void submit(const TilePtr& job, Node::gateway_type& gateway) {
    gateway.reserve_wait();
    std::unique_lock<std::mutex> lock(mutex_);
    ++open_;
    if (stopping() || free_.empty()) {
      queue_.push_back({job, &gateway});
      if (stopping()) drop_queued(lock);
      return;
    }
    const int session = free_.back();
    free_.pop_back();
    lock.unlock();
    launch({job, &gateway}, session);
  }

  // Waits until every tile handed in has left (the graph's wait can end early when it is
  // cancelled, while calls still use the stage).
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return open_ == 0; });
  }
  // drain(), then rethrows the first call's failure.
  void finish() {
    drain();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Pending {
    TilePtr job;
    Node::gateway_type* gateway = nullptr;
  };

  void launch(Pending p, int session) {
    auto task = [this, p, session] { complete(p, session); };
    if (waiters_[size_t(session)]) {
      waiters_[size_t(session)]->submit(std::move(task));
    } else {
      workers_[size_t(session)]->submit(std::move(task));
    }
  }

  // On the session's thread: the call, then its tile back into the graph and the session to the
  // next waiting tile.
  void complete(const Pending& p, int session) {
    std::exception_ptr failure;
    try {
      run_(*p.job, session);
    } catch (...) {
      failure = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (failure && !failed_) {
      failed_ = true;
      error_ = failure;
      context_.cancel_group_execution();  // the other stages stop; run_pipeline rethrows this
    }
    free_.push_back(session);
    std::optional<Pending> next;
    if (stopping()) {
      drop_queued(lock);
    } else if (!queue_.empty()) {
      next = queue_.front();
      queue_.pop_front();
      free_.pop_back();
    }
    lock.unlock();
    if (next) launch(*next, session);
    if (!failure) p.gateway->try_put(p.job);
    leave(*p.gateway);
  }

  // After a failure: the waiting tiles leave without a call (mutex_ held on entry and exit).
  void drop_queued(std::unique_lock<std::mutex>& lock) {
    std::deque<Pending> dropped;
    dropped.swap(queue_);
    lock.unlock();
    for (Pending& p : dropped) leave(*p.gateway);
    lock.lock();
  }

  void leave(Node::gateway_type& gateway) {
    gateway.release_wait();
    std::lock_guard<std::mutex> lock(mutex_);
    if (--open_ == 0) done_.notify_all();
  }

  // A call failed, or the graph was cancelled (another stage failed, or the job was interrupted):
  // waiting tiles get no call (mutex_ held).
  bool stopping() const { return failed_ || context_.is_group_execution_cancelled(); }

  tbb::task_group_context& context_;
  std::vector<parallel::DeviceWorker*> workers_;
  std::vector<std::unique_ptr<parallel::ModelThread>> waiters_;  // placed sessions only
  Run run_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<int> free_;      // sessions without a call
  std::deque<Pending> queue_;  // tiles waiting for one, in arrival order
  int64_t open_ = 0;           // tiles handed in and not yet left
  bool failed_ = false;
  std::exception_ptr error_;
};

// Adds the seconds a scope took to an atomic counter.
class StageTimer {
 public:
  explicit StageTimer(std::atomic<int64_t>& ns) : ns_(ns), start_(Clock::now()) {}
  ~StageTimer() {
    ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::atomic<int64_t>& ns_;
  Clock::time_point start_;
};

// Output size of a window along one axis.
int scaled(int v, const TilePlan& plan) {
  return int(int64_t(v) * plan.scale_num / plan.scale_den);
}

}  // namespace

Planar crop_window(const Planar& input, const TileRect& tile) {
  const int w = tile.x_window.size(), h = tile.y_window.size();
  Planar out(input.channels, input.frames, h, w);
  for (int c = 0; c < input.channels; ++c) {
    for (int t = 0; t < input.frames; ++t) {
      const float* src = input.plane(c, t);
      float* dst = out.plane(c, t);
      for (int y = 0; y < h; ++y) {
        std::memcpy(dst + size_t(y) * w,
                    src + size_t(tile.y_window.begin + y) * input.width + tile.x_window.begin,
                    sizeof(float) * w);
      }
    }
  }
  return out;
}

void blend_tile(const TilePlan& plan, const TileRect& tile, const Planar& tile_output,
                Planar& out) {
  const std::vector<float>& wx = plan.column_weights[tile.column];
  const std::vector<float>& wy = plan.row_weights[tile.row];
  // Region inside the window's output, and inside the frame's output.
  const int x0 = scaled(tile.x_region.begin - tile.x_window.begin, plan);
  const int y0 = scaled(tile.y_region.begin - tile.y_window.begin, plan);
  const int ox = scaled(tile.x_region.begin, plan), oy = scaled(tile.y_region.begin, plan);
  const int w = int(wx.size()), h = int(wy.size());
  if (tile_output.channels != out.channels || tile_output.frames != out.frames ||
      x0 + w > tile_output.width || y0 + h > tile_output.height) {
    throw Error("tile output has an unexpected shape", kExitSoftware);
  }
  for (int c = 0; c < out.channels; ++c) {
    for (int t = 0; t < out.frames; ++t) {
      const float* src = tile_output.plane(c, t);
      float* dst = out.plane(c, t);
      for (int y = 0; y < h; ++y) {
        const float* s = src + size_t(y0 + y) * tile_output.width + x0;
        float* d = dst + size_t(oy + y) * out.width + ox;
        const float row = wy[y];
        if (row == 0.0f) continue;
        for (int x = 0; x < w; ++x) {
          const float weight = row * wx[x];
          if (weight == 1.0f) {
            d[x] += s[x];  // hard seams (exact models): a copy, bit for bit
          } else if (weight != 0.0f) {
            d[x] += weight * s[x];
          }
        }
      }
    }
  }
}

void run_pipeline(SliceSource& source, std::vector<std::unique_ptr<ModelSession>>& sessions,
                  SliceSink& sink, const PipelineOptions& options) {
  if (sessions.empty()) throw Error("no model session to run", kExitSoftware);
  const TilePlan& plan = options.tiles;
  const int tiles = plan.tiles();
  // Session i runs on a lasting device worker of its device (LibTorch's per-thread cuDNN plan
  // cache; the worker's streams and staging): lane k for the k-th session on that device.
  std::vector<parallel::DeviceWorker*> workers;
  {
    std::map<std::string, int> lanes;
    for (size_t i = 0; i < sessions.size(); ++i) {
      const Device device = i < options.devices.size() ? options.devices[i] : Device{};
      workers.push_back(&parallel::device_worker(device, lanes[device.str()]++));
    }
  }
  std::atomic<int64_t> source_ns{0}, tile_ns{0}, model_ns{0}, blend_ns{0}, sink_ns{0};
  std::atomic<int64_t> slices{0};
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  std::atomic<int64_t> last_model_end_ns{0};  // since start

  tbb::task_group_context context;
  flow::graph g(context);

  flow::input_node<WorkPtr> input(g, [&](tbb::flow_control& fc) -> WorkPtr {
    if (options.cancel && options.cancel->load()) throw Cancelled("interrupted");
    StageTimer timer(source_ns);
    auto work = std::make_shared<SliceWork>();
    if (!source.next(*work)) {
      fc.stop();
      return {};
    }
    return work;
  });

  flow::limiter_node<WorkPtr> limiter(g, size_t(std::max(1, options.tokens)));

  using TilerNode = flow::multifunction_node<WorkPtr, std::tuple<TilePtr>>;
  TilerNode tiler(g, flow::serial, [&](const WorkPtr& work, TilerNode::output_ports_type& ports) {
    StageTimer timer(tile_ns);
    for (int i = 0; i < tiles; ++i) {
      auto job = std::make_shared<TileJob>();
      job->slice = work;
      job->tile = i;
      if (tiles == 1) {
        job->input = std::move(work->input);  // the whole frame: no copy
      } else {
        job->input = crop_window(work->input, plan.tile(i));
      }
      std::get<0>(ports).try_put(job);
    }
    work->input = Planar();  // every tile has its own copy now
  });

  std::vector<bool> placed;
  for (const auto& session : sessions) {
    placed.push_back(dynamic_cast<parallel::PlacedSession*>(session.get()) != nullptr);
  }
  ModelStage stage(context, workers, placed, [&](TileJob& job, int index) {
    StageTimer timer(model_ns);
    ModelSession& session = *sessions[size_t(index)];
    RunContext ctx;
    ctx.slice_index = job.slice->index;
    ctx.first_slice = job.slice->first;
    ctx.last_slice = job.slice->last;
    ctx.tile_index = job.tile;
    ctx.tiles = tiles;
    ctx.padded_frames = job.slice->padded;
    if (!job.slice->frames.empty()) ctx.first_frame = job.slice->frames.front().index;
    parallel::DeviceWorker& device_worker = *workers[size_t(index)];
    ctx.device = device_worker.context();
    // A session that can hands its output back before its last copies land (the blender
    // takes it), so the device starts the next slice meanwhile; sequence-parallel sessions
    // gather their ranks' parts and take it at once. (This runs on the session's worker, or
    // for a placed session, whose ranks run on workers of their own, on its waiter thread.)
    ctx.deferred = &job.deferred;
    job.output = session.run(std::move(job.input), ctx);
    // Output frames made on the worker, once per slice (tile 0); a deferred output counts
    // when the blender takes it.
    parallel::DeviceWorker* counted = placed[size_t(index)] ? nullptr : &device_worker;
    if (counted && job.tile == 0) {
      if (job.deferred) {
        job.deferred = [take = std::move(job.deferred), counted] {
          Planar out = take();
          counted->add_frames(out.frames);
          return out;
        };
      } else {
        counted->add_frames(job.output.frames);
      }
    }
    const int64_t end =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    for (int64_t seen = last_model_end_ns.load();
         end > seen && !last_model_end_ns.compare_exchange_weak(seen, end);) {
    }
  });
  ModelStage::Node worker(g, flow::serial,
                          [&](const TilePtr& job, ModelStage::Node::gateway_type& gateway) {
                            stage.submit(job, gateway);
                          });

  // Blends tiles into their slice's output; emits the slice when its last tile arrives.
  struct Pending {
    ResultPtr result;
    int tiles_done = 0;
  };
  std::map<int64_t, Pending> pending;
  using BlenderNode = flow::multifunction_node<TilePtr, std::tuple<ResultPtr>>;
  BlenderNode blender(
      g, flow::serial, [&](const TilePtr& job, BlenderNode::output_ports_type& ports) {
        StageTimer timer(blend_ns);  // (with the wait for a deferred output's last copies)
        if (job->deferred) job->output = std::exchange(job->deferred, nullptr)();
        const SliceWork& work = *job->slice;
        Pending& p = pending[work.index];
        if (!p.result) {
          p.result = std::make_shared<SliceResult>();
          p.result->index = work.index;
          p.result->first = work.first;
          p.result->last = work.last;
          p.result->frames = work.frames;
          p.result->padded = work.padded;
          p.result->overlap = work.overlap;
        }
        if (tiles == 1) {
          p.result->output = std::move(job->output);
        } else {
          if (p.result->output.empty()) {
            p.result->output = Planar(job->output.channels, job->output.frames,
                                      scaled(plan.height, plan), scaled(plan.width, plan));
          }
          blend_tile(plan, plan.tile(job->tile), job->output, p.result->output);
        }
        if (++p.tiles_done == tiles) {
          ResultPtr done = std::move(p.result);
          pending.erase(work.index);
          std::get<0>(ports).try_put(done);
        }
      });

  flow::sequencer_node<ResultPtr> sequencer(g, [](const ResultPtr& r) { return size_t(r->index); });

  flow::function_node<ResultPtr, flow::continue_msg> writer(g, flow::serial,
                                                            [&](const ResultPtr& result) {
                                                              StageTimer timer(sink_ns);
                                                              ++slices;
                                                              sink.write(std::move(*result));
                                                              return flow::continue_msg();
                                                            });

  flow::make_edge(input, limiter);
  flow::make_edge(limiter, tiler);
  flow::make_edge(flow::output_port<0>(tiler), worker);
  flow::make_edge(worker, blender);
  flow::make_edge(flow::output_port<0>(blender), sequencer);
  flow::make_edge(sequencer, writer);
  flow::make_edge(writer, limiter.decrementer());

  input.activate();
  try {
    g.wait_for_all();
  } catch (...) {
    stage.drain();  // (the graph's failure, not a call's, is the job's error)
    throw;
  }
  stage.finish();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  if (options.stats) {
    options.stats->wall_seconds += wall;
    options.stats->drain_seconds += std::max(0.0, wall - last_model_end_ns * 1e-9);
    options.stats->source_seconds += source_ns * 1e-9;
    options.stats->tile_seconds += tile_ns * 1e-9;
    options.stats->model_seconds += model_ns * 1e-9;
    options.stats->blend_seconds += blend_ns * 1e-9;
    options.stats->sink_seconds += sink_ns * 1e-9;
    options.stats->slices += slices;
  }
}

}  // namespace wm::sched
