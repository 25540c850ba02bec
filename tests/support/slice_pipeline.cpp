#include "tests/support/slice_pipeline.h"

#include <gtest/gtest.h>

#include <functional>
#include <utility>

#include "scheduler/pipeline.h"
#include "src/geometry.h"
#include "tests/support/planar_ops.h"

namespace wm::test {
namespace {

class LatentSlices : public sched::SliceSource {
 public:
  LatentSlices(const Planar& z, std::vector<int> sizes) : z_(z), sizes_(std::move(sizes)) {}
  bool next(sched::SliceWork& out) override {
    if (i_ == sizes_.size()) return false;
    out.index = int64_t(i_);
    out.first = i_ == 0;
    out.last = i_ + 1 == sizes_.size();
    out.input = frames(z_, t0_, sizes_[i_]);
    for (int t = 0; t < sizes_[i_]; ++t) out.frames.push_back({t0_ + t, t0_ + t, 1});
    t0_ += sizes_[i_++];
    return true;
  }

 private:
  const Planar& z_;
  std::vector<int> sizes_;
  size_t i_ = 0;
  int t0_ = 0;
};

class Gather : public sched::SliceSink {
 public:
  void write(sched::SliceResult&& r) override { parts.push_back(std::move(r.output)); }
  std::vector<Planar> parts;
};

}  // namespace

Planar decode_in_pipeline(std::vector<std::unique_ptr<ModelSession>>& sessions, const Planar& z,
                          const ModelTraits& traits, std::vector<int> slice_sizes) {
  LatentSlices source(z, std::move(slice_sizes));
  Gather sink;
  sched::PipelineOptions options;
  options.tiles = plan_tiles(z.width, z.height, 6, 6, 4, traits.halo, traits.scale_num,
                             traits.scale_den, 1, /*feather=*/true);
  EXPECT_GT(options.tiles.tiles(), 1);
  sched::run_pipeline(source, sessions, sink, options);
  return concat(sink.parts);
}

Planar run_in_slices(ModelSession& session, const Planar& input, const std::vector<int>& sizes,
                     bool deferred) {
  std::vector<Planar> outs;
  std::function<Planar()> previous;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.last_slice = i + 1 == sizes.size();
    std::function<Planar()> later;
    if (deferred) ctx.deferred = &later;
    Planar out = session.run(frames(input, t0, sizes[i]), ctx);
    if (previous) outs.push_back(std::exchange(previous, nullptr)());
    if (later) {
      previous = std::move(later);
    } else {
      outs.push_back(std::move(out));
    }
    t0 += sizes[i];
  }
  if (previous) outs.push_back(previous());
  return concat(outs);
}

}  // namespace wm::test
