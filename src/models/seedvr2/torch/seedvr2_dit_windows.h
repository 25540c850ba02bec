// The window plans of SeedVR2's DiT (seedvr2_dit.cpp) as its forward and its sequence-parallel
// split (seedvr2_dit_split.h) share them: a token grid's video tokens in window order, windows of
// one shape next to each other (one batched attention call per shape), and the way back.
// Internal to src/models/seedvr2/torch/.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <vector>

namespace wm::models::seedvr2 {

// The angle tables of one window shape (or of the text): per token and rotated pair, cos and
// sin, float32 on the device: [n, 1, pairs] (one head axis to broadcast over).
struct RopeTable {
  at::Tensor cos, sin;
};

// A window plan of a token grid: the video tokens in window order (windows of one shape next to
// each other, so each shape is one batched attention call), and the way back.
struct WindowGroup {
  int64_t offset = 0;   // first position in window order
  int64_t windows = 0;  // windows of this shape
  int64_t nt = 0, nh = 0, nw = 0;
  int64_t tokens() const { return nt * nh * nw; }
};
struct WindowPlan {
  at::Tensor order;    // [N] int64: token index at each position of window order
  at::Tensor inverse;  // [N]: position in window order of each token
  std::vector<WindowGroup> groups;
  int64_t windows = 0;
  std::map<int, std::vector<RopeTable>> rope;  // per RoPE frequency set: per group
  // The fused CUDA path's packed layout: every window's sequence (its video rows, then the text
  // rows) one after another, group by group. Items say which qkv row goes to which packed row
  // with which RoPE positions (int32/float32 on the device).
  struct Packed {
    bool made = false;
    int64_t rows = 0;
    std::vector<int64_t> base;  // per group: its first packed row
    at::Tensor video_src, video_dest, video_pos;
    at::Tensor text_src, text_dest, text_pos;
    at::Tensor video_rows;  // [N] int64: the packed row of each token
    at::Tensor text_rows;   // [windows · L] int64: the text rows, window by window
  } packed;
};

}  // namespace wm::models::seedvr2
