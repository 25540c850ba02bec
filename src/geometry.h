// Geometry of the work split: spatial tiles (with halos and blend weights) and temporal slices.
// Pure functions of sizes and model facts; no Torch, no libav.
//
// Tiles: the frame is cut into a grid of overlapping tiles (tile size and overlap in input
// pixels, clamped to the frame). Each tile's model input is its region grown by the model's halo
// and clamped to the frame (`window`). After the model, the output of the window is cropped back
// to the tile's region (scaled) and blended with separable feathered weights that sum to exactly
// 1 at every output pixel. When the halo covers the model's support, every tile computes the
// untiled values on its region, so the blend reproduces the untiled frame.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wm {

struct Span {
  int begin = 0;  // first pixel
  int end = 0;    // one past the last
  int size() const { return end - begin; }
};

// One axis of a tile grid.
struct AxisPlan {
  int length = 0;             // input pixels along this axis
  std::vector<Span> regions;  // tile regions, input pixels, ordered, covering [0, length)
  std::vector<Span> windows;  // regions grown by the halo, clamped to [0, length)
};

struct TileRect {
  int index = 0;
  int column = 0;
  int row = 0;
  Span x_region, y_region;  // input pixels
  Span x_window, y_window;  // input pixels the model sees
};

struct TilePlan {
  int width = 0;  // input frame size
  int height = 0;
  int scale_num = 1;  // output = input * num / den
  int scale_den = 1;
  AxisPlan columns;
  AxisPlan rows;
  // Per column/row blend weights over the tile's OUTPUT region (region * scale); for every output
  // pixel the weights of the tiles covering it sum to 1.
  std::vector<std::vector<float>> column_weights;
  std::vector<std::vector<float>> row_weights;

  int tiles() const { return int(columns.regions.size() * rows.regions.size()); }
  TileRect tile(int index) const;
  int out_width() const { return width * scale_num / scale_den; }
  int out_height() const { return height * scale_num / scale_den; }
};

// Splits `length` into tiles of `tile` (clamped to length) overlapping by at least `overlap`,
// and grows each by `halo`. Starts, sizes and windows are multiples of `multiple` (the model's
// size_multiple; `length` must be one too). Throws std::invalid_argument on impossible input
// (tile <= overlap, length not a multiple).
AxisPlan plan_axis(int length, int tile, int overlap, int halo, int multiple = 1);

// A whole-frame plan when tile_width/height <= 0 (one tile, no halo needed). `feather` as in
// blend_weights: false for models whose halo is exact.
TilePlan plan_tiles(int width, int height, int tile_width, int tile_height, int overlap, int halo,
                    int scale_num = 1, int scale_den = 1, int multiple = 1, bool feather = true);

// 1-D weights over each region scaled to output pixels, summing to 1 at each output pixel.
// Feathered: a linear ramp across the part a region shares with a neighbour, 1 elsewhere,
// normalised. Not feathered (for exact models, whose tiles agree on shared pixels): each shared
// part is cut in the middle, weights are 0 or 1, so every output value is copied bit for bit
// from one tile.
std::vector<std::vector<float>> blend_weights(const AxisPlan& axis, int scale_num, int scale_den,
                                              bool feather = true);

// Temporal slices of a stream of frames.
struct SliceRule {
  int slice_frames = 16;  // frames per slice (after the first)
  int first_frames = 16;  // frames in the first slice
  // Sizes must be `offset + group*k` for the first slice and `group*k` afterwards (Wan encode:
  // offset 1, group 4). The last slice may be shorter; see pad_frames.
  int group = 1;
  int offset = 0;
};

// Frames per slice when the job leaves `slice_frames` at 0 (auto). Frame-wise models get as many
// frames as fit in ~64 MiB of output (1 at 4K, at most 8) so memory stays small and flat; models
// with temporal coupling get 4 groups (4 latent frames decoded per call, or 1+16 frames encoded),
// enough frames per convolution call to keep the convolutions efficient.
int auto_slice_frames(int requested, bool temporal, int64_t output_frame_bytes);
// Latent frames per decode_latents slice when the job leaves `slice_frames` at 0: 4, but 16 for
// seedvr2-vae on GPUs (`gpu`), whose decode runs in phases where its causal state does not fit
// the device (1080p in 16 GiB): each slice then moves the whole state to the host and back, which
// larger slices amortise (docs/gpu.md); the session's host budget bounds what a slice holds.
int auto_decode_slice_frames(int requested, const std::string& kind, bool gpu);

// The rule for a model with frame grouping `group`/`offset` and a requested slice length.
SliceRule make_slice_rule(int requested, int group, int offset);

// Frames to append (repeating the last frame) so that `frames` in total is offset + group*k.
int64_t pad_frames(int64_t frames, int group, int offset);

struct SliceRange {
  int64_t index = 0;
  int64_t first = 0;  // first frame
  int64_t count = 0;
};

// Slices of a video of `frames` frames under `rule` (for planning and farm chunks).
std::vector<SliceRange> plan_slices(int64_t frames, const SliceRule& rule);

}  // namespace wm
