#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "parallel/device_worker.h"
#include "scheduler/pipeline.h"
#include "src/base/error.h"

namespace wm::sched {
namespace {

// A source of `slices` random slices [3, frames, h, w]; remembers what it produced.
class RandomSource : public SliceSource {
 public:
  RandomSource(int slices, int frames, int h, int w)
      : slices_(slices), frames_(frames), h_(h), w_(w) {}
  bool next(SliceWork& out) override {
    const int n = produced_.load();
    if (n == slices_) return false;
    out.index = n;
    out.first = n == 0;
    out.last = n + 1 == slices_;
    out.input = Planar(3, frames_, h_, w_);
    std::mt19937 rng(unsigned(n + 1));
    std::uniform_real_distribution<float> u(0.f, 1.f);
    for (float& v : out.input.data) v = u(rng);
    for (int t = 0; t < frames_; ++t) out.frames.push_back({int64_t(n) * frames_ + t, 0, 1});
    produced_.fetch_add(1);
    in_flight.fetch_add(1);
    max_in_flight = std::max(max_in_flight.load(), in_flight.load());
    return true;
  }
  int produced() const { return produced_.load(); }
  std::atomic<int> in_flight{0};
  std::atomic<int> max_in_flight{0};

 private:
  int slices_, frames_, h_, w_;
  std::atomic<int> produced_{0};  // read by model threads too
};

class CollectSink : public SliceSink {
 public:
  explicit CollectSink(RandomSource* source = nullptr) : source_(source) {}
  void write(SliceResult&& r) override {
    order.push_back(r.index);
    outputs.push_back(std::move(r.output));
    if (source_) source_->in_flight.fetch_sub(1);
  }
  std::vector<int64_t> order;
  std::vector<Planar> outputs;

 private:
  RandomSource* source_;
};

// A model session that sleeps a varying time, so workers finish out of order.
class JitterSession : public ModelSession {
 public:
  Planar run(Planar&& input, const RunContext& ctx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds((ctx.slice_index * 7) % 5));
    for (float& v : input.data) v = v * 2 + 1;
    return std::move(input);
  }
};

class ThrowingSession : public ModelSession {
 public:
  Planar run(Planar&& input, const RunContext& ctx) override {
    if (ctx.slice_index == 2) throw ModelError("boom at slice 2");
    return std::move(input);
  }
};

// Records the threads it ran on.
class ThreadRecordingSession : public ModelSession {
 public:
  Planar run(Planar&& input, const RunContext&) override {
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
    return std::move(input);
  }
  std::mutex mutex;
  std::set<std::thread::id> threads;
};

std::vector<std::unique_ptr<ModelSession>> resampler_sessions(const std::string& kind, int n) {
  ModelConfig config;
  config.kind = kind;
  config.scale = 2;
  auto model = make_model(config, Device{});
  std::vector<std::unique_ptr<ModelSession>> out;
  for (int i = 0; i < n; ++i) out.push_back(model->open_session(Device{}));
  return out;
}

TEST(Pipeline, KeepsSliceOrderWithParallelWorkers) {
  RandomSource source(12, 2, 8, 8);
  CollectSink sink(&source);
  std::vector<std::unique_ptr<ModelSession>> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(std::make_unique<JitterSession>());
  PipelineOptions options;
  options.tokens = 4;
  options.tiles = plan_tiles(8, 8, 0, 0, 0, 0);
  run_pipeline(source, sessions, sink, options);
  ASSERT_EQ(sink.order.size(), 12u);
  for (size_t i = 0; i < sink.order.size(); ++i) EXPECT_EQ(sink.order[i], int64_t(i));
  // The limiter bounds slices in flight to the tokens, plus the one the source node holds ready
  // while the limiter is full (TBB's input_node reads ahead by one).
  EXPECT_LE(source.max_in_flight.load(), 4 + 1);
  EXPECT_GE(source.max_in_flight.load(), 1);
}

// Hands every slice's output back deferred (as a CUDA session does while its last copies land).
class DeferringSession : public ModelSession {
 public:
  Planar run(Planar&& input, const RunContext& ctx) override {
    for (float& v : input.data) v = v * 2 + 1;
    if (!ctx.deferred) return std::move(input);
    auto out = std::make_shared<Planar>(std::move(input));
    *ctx.deferred = [out] { return std::move(*out); };
    return Planar();
  }
};

// Deferred outputs reach the sink in order and whole, and each worker's frame count (the
// report's device_<dev>_frames) counts them when taken: every frame once.
TEST(Pipeline, DeferredOutputsArriveAndCountTheirFrames) {
  RandomSource source(6, 3, 4, 4);
  RandomSource reference(6, 3, 4, 4);
  CollectSink sink;
  std::vector<std::unique_ptr<ModelSession>> sessions;
  for (int i = 0; i < 2; ++i) sessions.push_back(std::make_unique<DeferringSession>());
  PipelineOptions options;
  options.tiles = plan_tiles(4, 4, 0, 0, 0, 0);
  options.devices = {Device{}, Device{}};
  int64_t before = 0;
  for (int lane = 0; lane < 2; ++lane)
    before += parallel::device_worker(Device{}, lane).stats().frames;
  run_pipeline(source, sessions, sink, options);
  int64_t after = 0;
  for (int lane = 0; lane < 2; ++lane)
    after += parallel::device_worker(Device{}, lane).stats().frames;
  EXPECT_EQ(after - before, 6 * 3);
  ASSERT_EQ(sink.outputs.size(), 6u);
  for (size_t i = 0; i < sink.outputs.size(); ++i) {
    SliceWork w;
    ASSERT_TRUE(reference.next(w));
    ASSERT_EQ(sink.outputs[i].data.size(), w.input.data.size()) << i;
    for (size_t k = 0; k < w.input.data.size(); ++k) {
      ASSERT_EQ(sink.outputs[i].data[k], w.input.data[k] * 2 + 1) << i;
    }
  }
}

// LibTorch caches cuDNN's tuned plans per thread: session i must always run on the same thread,
// in this pipeline and in the next one (the next job of a batch).
TEST(Pipeline, EachSessionRunsOnItsOwnLastingThread) {
  std::vector<std::set<std::thread::id>> seen;
  for (int run = 0; run < 2; ++run) {
    RandomSource source(24, 1, 4, 4);
    CollectSink sink(&source);
    std::vector<std::unique_ptr<ModelSession>> sessions;
    for (int i = 0; i < 3; ++i) sessions.push_back(std::make_unique<ThreadRecordingSession>());
    PipelineOptions options;
    options.tokens = 6;
    options.tiles = plan_tiles(4, 4, 0, 0, 0, 0);
    run_pipeline(source, sessions, sink, options);
    ASSERT_EQ(sink.order.size(), 24u);
    for (size_t i = 0; i < sessions.size(); ++i) {
      const auto& threads = static_cast<ThreadRecordingSession&>(*sessions[i]).threads;
      EXPECT_LE(threads.size(), 1u) << "session " << i;
      if (run == 0) {
        seen.push_back(threads);
      } else if (!threads.empty() && !seen[i].empty()) {
        EXPECT_EQ(threads, seen[i]) << "session " << i << " moved to another thread";
      }
      EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
    }
  }
  std::set<std::thread::id> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  size_t used = 0;
  for (const auto& s : seen) used += s.size();
  EXPECT_EQ(all.size(), used) << "two sessions shared a thread";
  EXPECT_GE(used, 1u);
}

TEST(Pipeline, ModelErrorPropagatesFromWait) {
  RandomSource source(6, 1, 4, 4);
  CollectSink sink;
  std::vector<std::unique_ptr<ModelSession>> sessions;
  sessions.push_back(std::make_unique<ThrowingSession>());
  PipelineOptions options;
  options.tiles = plan_tiles(4, 4, 0, 0, 0, 0);
  EXPECT_THROW(run_pipeline(source, sessions, sink, options), ModelError);
  EXPECT_LT(sink.order.size(), 6u);
}

// Cancels from inside the model while it runs slice `at_`, once the source has read `ahead_`
// slices past it: the graph is stopped with work in flight, not before it starts.
class CancellingSession : public ModelSession {
 public:
  CancellingSession(RandomSource& source, std::atomic<bool>& cancel, int at, int ahead)
      : source_(source), cancel_(cancel), at_(at), ahead_(ahead) {}
  Planar run(Planar&& input, const RunContext& ctx) override {
    if (ctx.slice_index == at_) {
      // The limiter lets the source read ahead while this slice is held here.
      while (source_.produced() < at_ + 1 + ahead_) std::this_thread::yield();
      produced_at_cancel = source_.produced();
      in_flight_at_cancel = source_.in_flight.load();
      cancel_.store(true);
    }
    return std::move(input);
  }
  int produced_at_cancel = -1;
  int in_flight_at_cancel = -1;

 private:
  RandomSource& source_;
  std::atomic<bool>& cancel_;
  int at_, ahead_;
};

TEST(Pipeline, CancelWithSlicesInFlightStopsWithCancelled) {
  RandomSource source(50, 1, 4, 4);
  CollectSink sink(&source);
  std::atomic<bool> cancel{false};
  std::vector<std::unique_ptr<ModelSession>> sessions;
  sessions.push_back(std::make_unique<CancellingSession>(source, cancel, 5, 2));
  const auto& session = static_cast<const CancellingSession&>(*sessions[0]);
  PipelineOptions options;
  options.tokens = 4;
  options.tiles = plan_tiles(4, 4, 0, 0, 0, 0);
  options.cancel = &cancel;
  EXPECT_THROW(run_pipeline(source, sessions, sink, options), Cancelled);
  // Proof that slices were in flight when it was cancelled: slice 5 in the model, and the two
  // after it already read by the source, none of them written.
  ASSERT_GE(session.produced_at_cancel, 8);
  EXPECT_GE(session.in_flight_at_cancel, 3);
  // The source stops at the next slice boundary: at most the one read it had begun.
  EXPECT_LE(source.produced(), session.produced_at_cancel + 1);
  EXPECT_LT(source.produced(), 50);
  // What was written is a gap-free prefix of what was read (slices already in flight may still
  // drain to the sink, the one read after the cancel included).
  EXPECT_LE(sink.order.size(), size_t(source.produced()));
  for (size_t i = 0; i < sink.order.size(); ++i) EXPECT_EQ(sink.order[i], int64_t(i));
}

// Holds slice 0 until the source has read `ahead` slices past it.
class HoldingSession : public ModelSession {
 public:
  HoldingSession(RandomSource& source, int ahead) : source_(source), ahead_(ahead) {}
  Planar run(Planar&& input, const RunContext& ctx) override {
    if (ctx.slice_index == 0) {
      while (source_.produced() < 1 + ahead_) std::this_thread::yield();
    }
    return std::move(input);
  }

 private:
  RandomSource& source_;
  int ahead_;
};

// A model call parks no TBB thread (the model node is an async node whose calls run on the
// session's worker): in an arena of one thread the source still reads ahead while the model
// holds slice 0. (Were the call waited for on a graph thread, this would never finish.)
TEST(Pipeline, ModelCallsLeaveTheGraphThreadsFree) {
  RandomSource source(10, 1, 4, 4);
  CollectSink sink(&source);
  std::vector<std::unique_ptr<ModelSession>> sessions;
  sessions.push_back(std::make_unique<HoldingSession>(source, 3));
  PipelineOptions options;
  options.tokens = 4;
  options.tiles = plan_tiles(4, 4, 0, 0, 0, 0);
  tbb::task_arena one(1);
  one.execute([&] { run_pipeline(source, sessions, sink, options); });
  ASSERT_EQ(sink.order.size(), 10u);
  for (size_t i = 0; i < sink.order.size(); ++i) EXPECT_EQ(sink.order[i], int64_t(i));
  EXPECT_GE(source.max_in_flight.load(), 4);  // slice 0 held, three more read meanwhile
}

// Tiles with the model's halo reproduce the untiled result, for tile sizes that do and do not
// divide the frame, with and without overlap.
TEST(Pipeline, TiledEqualsUntiledForExactModels) {
  const int h = 37, w = 53;
  for (const char* kind : {"lanczos", "bicubic"}) {
    RandomSource whole_source(2, 2, h, w);
    CollectSink whole;
    auto sessions = resampler_sessions(kind, 1);
    PipelineOptions options;
    const int halo = std::string(kind) == "lanczos" ? 3 : 2;
    options.tiles = plan_tiles(w, h, 0, 0, 0, halo, 2, 1, 1, /*feather=*/false);
    run_pipeline(whole_source, sessions, whole, options);
    struct Case {
      int tw, th, overlap;
    };
    for (Case c : {Case{16, 16, 0}, Case{16, 10, 4}, Case{20, 13, 6}, Case{32, 32, 8}}) {
      SCOPED_TRACE(testing::Message()
                   << kind << " tile " << c.tw << "x" << c.th << " overlap " << c.overlap);
      RandomSource source(2, 2, h, w);
      CollectSink tiled;
      auto workers = resampler_sessions(kind, 2);
      options.tiles = plan_tiles(w, h, c.tw, c.th, c.overlap, halo, 2, 1, 1, /*feather=*/false);
      ASSERT_GT(options.tiles.tiles(), 1);
      run_pipeline(source, workers, tiled, options);
      ASSERT_EQ(tiled.outputs.size(), whole.outputs.size());
      // Bit-identical, as docs/job-format.md promises for exact models: not merely close.
      for (size_t s = 0; s < whole.outputs.size(); ++s) {
        const Planar& a = whole.outputs[s];
        const Planar& b = tiled.outputs[s];
        ASSERT_EQ(b.data.size(), a.data.size());
        size_t differing = 0, first = a.data.size();
        for (size_t i = 0; i < a.data.size(); ++i) {
          if (std::memcmp(&a.data[i], &b.data[i], sizeof(float)) != 0) {
            if (differing++ == 0) first = i;
          }
        }
        EXPECT_EQ(differing, 0u) << "slice " << s << ": first difference at " << first << " ("
                                 << (differing ? a.data[first] : 0.f) << " vs "
                                 << (differing ? b.data[first] : 0.f) << ")";
      }
    }
  }
}

TEST(BlendTile, WeightsSumToOneOverConstantTiles) {
  TilePlan plan = plan_tiles(30, 20, 12, 8, 4, 0, 1, 1);  // feathered
  Planar out(1, 1, 20, 30);
  for (int i = 0; i < plan.tiles(); ++i) {
    TileRect t = plan.tile(i);
    Planar tile(1, 1, t.y_window.size(), t.x_window.size());
    std::fill(tile.data.begin(), tile.data.end(), 1.0f);
    blend_tile(plan, t, tile, out);
  }
  for (float v : out.data) EXPECT_NEAR(v, 1.0f, 1e-6);
}

}  // namespace
}  // namespace wm::sched
