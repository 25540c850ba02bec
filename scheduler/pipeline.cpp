#include "scheduler/pipeline.h"

#include <tbb/flow_graph.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "parallel/device_worker.h"
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

// A pool of sessions; a worker takes one (with its index) for the duration of a call. The
// worker node's concurrency equals the pool size, so a free session always exists.
class SessionPool {
 public:
  explicit SessionPool(std::vector<std::unique_ptr<ModelSession>>& sessions) {
    for (size_t i = 0; i < sessions.size(); ++i) free_.push_back({sessions[i].get(), int(i)});
  }
  std::pair<ModelSession*, int> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto s = free_.back();
    free_.pop_back();
    return s;
  }
  void give(std::pair<ModelSession*, int> s) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(s);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<ModelSession*, int>> free_;
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
  SessionPool pool(sessions);
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

  flow::graph g;

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

  flow::function_node<TilePtr, TilePtr> worker(
      g, sessions.size(), [&](const TilePtr& job) -> TilePtr {
        StageTimer timer(model_ns);
        const auto taken = pool.take();
        struct Return {
          SessionPool& pool;
          std::pair<ModelSession*, int> taken;
          ~Return() { pool.give(taken); }
        } give_back{pool, taken};
        RunContext ctx;
        ctx.slice_index = job->slice->index;
        ctx.first_slice = job->slice->first;
        ctx.last_slice = job->slice->last;
        ctx.tile_index = job->tile;
        ctx.tiles = tiles;
        ctx.padded_frames = job->slice->padded;
        if (!job->slice->frames.empty()) ctx.first_frame = job->slice->frames.front().index;
        parallel::DeviceWorker& device_worker = *workers[size_t(taken.second)];
        ctx.device = device_worker.context();
        // A session that can hands its output back before its last copies land (the blender
        // takes it), so the device starts the next slice meanwhile; sequence-parallel sessions
        // gather their ranks' parts and take it at once.
        ctx.deferred = &job->deferred;
        const bool placed = dynamic_cast<parallel::PlacedSession*>(taken.first) != nullptr;
        if (placed) {
          // A session that runs on workers of its own (a rank's WorkerSession, sequence
          // parallel) is only waited for.
          job->output = taken.first->run(std::move(job->input), ctx);
        } else {
          job->output =
              device_worker.call([&] { return taken.first->run(std::move(job->input), ctx); });
        }
        // Output frames made on the worker, once per slice (tile 0); a deferred output counts
        // when the blender takes it.
        parallel::DeviceWorker* counted = placed ? nullptr : &device_worker;
        if (counted && job->tile == 0) {
          if (job->deferred) {
            job->deferred = [take = std::move(job->deferred), counted] {
              Planar out = take();
              counted->add_frames(out.frames);
              return out;
            };
          } else {
            counted->add_frames(job->output.frames);
          }
        }
        const int64_t end =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
        for (int64_t seen = last_model_end_ns.load();
             end > seen && !last_model_end_ns.compare_exchange_weak(seen, end);) {
        }
        return job;
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
  g.wait_for_all();
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
