#include <gtest/gtest.h>

#include <stdexcept>

#include "src/geometry.h"

namespace wm {
namespace {

// Every pixel of [0, length) is covered, regions are ordered, windows hold their region grown by
// the halo (clamped), and the regions' blend weights sum to 1 at every output pixel.
void expect_valid_axis(const AxisPlan& a, int halo, int scale_num, int scale_den,
                       bool feather = true) {
  ASSERT_FALSE(a.regions.empty());
  EXPECT_EQ(a.regions.front().begin, 0);
  EXPECT_EQ(a.regions.back().end, a.length);
  for (size_t i = 0; i < a.regions.size(); ++i) {
    const Span& r = a.regions[i];
    const Span& w = a.windows[i];
    EXPECT_GT(r.size(), 0);
    if (i > 0) {
      EXPECT_LE(r.begin, a.regions[i - 1].end) << "gap before region " << i;
      EXPECT_GT(r.begin, a.regions[i - 1].begin);
    }
    EXPECT_EQ(w.begin, std::max(0, r.begin - halo));
    EXPECT_EQ(w.end, std::min(a.length, r.end + halo));
  }
  const auto weights = blend_weights(a, scale_num, scale_den, feather);
  const int out = a.length * scale_num / scale_den;
  std::vector<double> total(out, 0.0);
  for (size_t i = 0; i < weights.size(); ++i) {
    const int begin = a.regions[i].begin * scale_num / scale_den;
    ASSERT_EQ(int(weights[i].size()), a.regions[i].size() * scale_num / scale_den);
    for (size_t x = 0; x < weights[i].size(); ++x) {
      if (feather) {
        EXPECT_GT(weights[i][x], 0.0f);
      } else {
        EXPECT_TRUE(weights[i][x] == 0.0f || weights[i][x] == 1.0f);
      }
      total[begin + x] += weights[i][x];
    }
  }
  for (int x = 0; x < out; ++x) EXPECT_NEAR(total[x], 1.0, 1e-6) << "output pixel " << x;
}

TEST(PlanAxis, WholeFrameWhenTileDisabledOrLarger) {
  for (int tile : {0, -1, 100, 500}) {
    AxisPlan a = plan_axis(100, tile, 8, 3);
    ASSERT_EQ(a.regions.size(), 1u) << tile;
    EXPECT_EQ(a.regions[0].begin, 0);
    EXPECT_EQ(a.regions[0].end, 100);
    EXPECT_EQ(a.windows[0].end, 100);
  }
}

TEST(PlanAxis, TilesThatDoNotDivideTheFrame) {
  AxisPlan a = plan_axis(100, 40, 8, 3);
  ASSERT_EQ(a.regions.size(), 3u);
  EXPECT_EQ(a.regions[1].begin, 32);
  EXPECT_EQ(a.regions[2].begin, 60);  // last tile is moved back to end at the edge
  EXPECT_EQ(a.regions[2].end, 100);
  expect_valid_axis(a, 3, 2, 1);
}

TEST(PlanAxis, EdgeCasesAcrossSizes) {
  for (int length : {1, 2, 7, 33, 481, 853}) {
    for (int tile : {1, 2, 5, 16, 64}) {
      for (int overlap : {0, 1, 4}) {
        if (overlap >= tile && tile < length) continue;
        SCOPED_TRACE(testing::Message() << length << " " << tile << " " << overlap);
        AxisPlan a = plan_axis(length, tile, overlap, 3);
        expect_valid_axis(a, 3, 3, 1);
        expect_valid_axis(a, 3, 3, 1, /*feather=*/false);
      }
    }
  }
}

TEST(PlanAxis, RejectsOverlapNotBelowTile) {
  EXPECT_THROW(plan_axis(100, 16, 16, 0), std::invalid_argument);
  EXPECT_THROW(plan_axis(100, 16, 20, 0), std::invalid_argument);
}

TEST(PlanAxis, MultiplesAreKept) {
  AxisPlan a = plan_axis(96, 36, 5, 3, 8);  // tile 32, overlap 8, halo 8
  for (size_t i = 0; i < a.regions.size(); ++i) {
    EXPECT_EQ(a.regions[i].begin % 8, 0);
    EXPECT_EQ(a.regions[i].end % 8, 0);
    EXPECT_EQ(a.windows[i].begin % 8, 0);
    EXPECT_EQ(a.windows[i].end % 8, 0);
  }
  expect_valid_axis(a, 8, 1, 8);
  EXPECT_THROW(plan_axis(97, 32, 8, 0, 8), std::invalid_argument);
}

TEST(PlanTiles, GridIndexing) {
  TilePlan p = plan_tiles(100, 50, 40, 30, 8, 3, 2, 1);
  EXPECT_EQ(p.tiles(), 3 * 2);
  EXPECT_EQ(p.out_width(), 200);
  EXPECT_EQ(p.out_height(), 100);
  TileRect t = p.tile(4);
  EXPECT_EQ(t.column, 1);
  EXPECT_EQ(t.row, 1);
  EXPECT_EQ(t.x_region.begin, 32);
  EXPECT_EQ(t.y_region.begin, 20);
  EXPECT_EQ(t.y_window.end, 50);
}

TEST(Slices, RuleAndPadding) {
  SliceRule plain = make_slice_rule(16, 1, 0);
  EXPECT_EQ(plain.first_frames, 16);
  EXPECT_EQ(plain.slice_frames, 16);
  SliceRule wan = make_slice_rule(18, 4, 1);  // rounds down to whole groups
  EXPECT_EQ(wan.slice_frames, 16);
  EXPECT_EQ(wan.first_frames, 17);
  EXPECT_EQ(pad_frames(17, 4, 1), 0);
  EXPECT_EQ(pad_frames(18, 4, 1), 3);
  EXPECT_EQ(pad_frames(1, 4, 1), 0);
  EXPECT_EQ(pad_frames(0, 4, 1), 1);
  EXPECT_EQ(pad_frames(6, 4, 0), 2);
  EXPECT_EQ(pad_frames(5, 1, 0), 0);
}

TEST(Slices, PlanCoversEveryFrameOnce) {
  for (int64_t frames : {1, 2, 16, 17, 100}) {
    auto slices = plan_slices(frames, make_slice_rule(8, 4, 1));
    int64_t next = 0;
    for (size_t i = 0; i < slices.size(); ++i) {
      EXPECT_EQ(slices[i].index, int64_t(i));
      EXPECT_EQ(slices[i].first, next);
      EXPECT_GT(slices[i].count, 0);
      next += slices[i].count;
    }
    EXPECT_EQ(next, frames);
    EXPECT_LE(slices[0].count, 9);
  }
}

}  // namespace
}  // namespace wm

// decode_latents slices: 4 latent frames by default, 16 for seedvr2-vae on GPUs (its decode in
// phases moves its whole causal state per slice); a job's own slice_frames always wins.
TEST(AutoDecodeSlice, SeedVR2OnGpusTakesLargerSlices) {
  EXPECT_EQ(wm::auto_decode_slice_frames(0, "wan2.1-vae", true), 4);
  EXPECT_EQ(wm::auto_decode_slice_frames(0, "seedvr2-vae", false), 4);
  EXPECT_EQ(wm::auto_decode_slice_frames(0, "seedvr2-vae", true), 16);
  EXPECT_EQ(wm::auto_decode_slice_frames(3, "seedvr2-vae", true), 3);
  EXPECT_EQ(wm::auto_decode_slice_frames(5, "wan2.1-vae", false), 5);
}
