// SeedVR2's diffusion transformer (NaDiT): the architecture facts, the checkpoint key layout and
// the window geometry, apart from the math (seedvr2_dit.*). Two variants (../shared/
// seedvr2-dit-spec.md §1–2, §6):
// - 3B (`models/dit_v2`): blocks [0, mm_layers) with separate video/text weights (`.vid.`/`.txt.`),
//   the rest shared (`.all.`); SwiGLU MLP without biases; RoPE on video and text (mmrope3d);
//   an output RMSNorm with modulation (`vid_out_norm`, `vid_out_ada`).
// - 7B (`models/dit`): every block separate; GELU(tanh) MLP with biases; RoPE on video only
//   ("pixel" frequencies); no output norm.
// The official key lists: tests/data/golden/seedvr2-dit-tiny/keys_full.txt (3B) and
// keys_full_7b.txt; dit_layout() produces the same lists (test_seedvr2_dit).
//
// Torch-free; internal to src/models/ (and tests).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "src/models/seedvr2/seedvr2_layout.h"

namespace wm::models::seedvr2 {

enum class DitVariant { k3B, k7B };

struct DitArchitecture {
  DitVariant variant = DitVariant::k3B;
  int64_t dim = 2560;         // vid_dim = txt_dim
  int64_t txt_in_dim = 5120;  // the text embedding's width
  int heads = 20;
  int64_t head_dim = 128;
  int layers = 32;
  int mm_layers = 10;         // blocks with separate video/text weights (7B: all)
  int64_t mlp_hidden = 6912;  // SwiGLU hidden (3B), 4·dim (7B)
  int64_t rope_freqs = 21;    // entries of attn.rope.rope.freqs: angles per axis = 2× this
  int64_t in_channels = 33;   // 16 noise + 16 condition latent + 1 mask
  int64_t out_channels = 16;
  static constexpr int kPatch = 2;  // 1 × 2 × 2 patches

  static DitArchitecture official_3b();
  static DitArchitecture official_7b();
  bool separate(int block) const { return variant == DitVariant::k7B || block < mm_layers; }
  // The 3B's last block uses the text only as keys and values (spec §5).
  bool text_tail(int block) const { return variant == DitVariant::k3B && block == layers - 1; }
  bool out_norm() const { return variant == DitVariant::k3B; }
  bool swiglu() const { return variant == DitVariant::k3B; }
  int64_t emb_dim() const { return 6 * dim; }
  int64_t inner() const { return int64_t(heads) * head_dim; }
  int64_t rope_axis() const { return 2 * rope_freqs; }
  int64_t patch_features() const { return in_channels * kPatch * kPatch; }
  // Throws ModelError when the numbers do not fit together.
  void validate() const;
  // "3B layout: dim 64, 2 heads × 32, 4 layers (2 separate), MLP 256, text 32"
  std::string str() const;
};

struct DitParam {
  std::string key;
  std::vector<int64_t> shape;
  int block = -1;  // the block it belongs to, −1 outside the blocks
};

// Every parameter, in the official state_dict order (RoPE frequency buffers included).
std::vector<DitParam> dit_layout(const DitArchitecture& arch);

// The architecture of a checkpoint: the variant from its MLP keys, widths, layers and the
// mm/shared split from its shapes; `heads` > 0 sets the head count (the head width is then
// inner / heads), 0 reads it from the q-norm weight's width. Never throws: keys the file lacks
// keep the official values and the caller's layout check names them.
DitArchitecture infer_dit_architecture(const ShapeOf& shape_of, int heads);

// Window attention geometry (spec §6) on a token grid of t × h × w.
struct TokenRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};
struct DitWindow {
  TokenRange t, h, w;
  int64_t tokens() const { return int64_t(t.size()) * h.size() * w.size(); }
};
// Window sizes (t, h, w) for the grid: the 720p-rescaled rule of the (4, 3, 3) window spec.
std::array<int, 3> dit_window_size(int t, int h, int w);
// Ranges of one axis of length n for window size s: regular, or shifted (a half window first).
std::vector<TokenRange> dit_window_ranges(int n, int s, bool shifted);
// The windows of a grid, in upstream order (column range slowest, then row, then time).
// Regular for even blocks, shifted for odd ones.
std::vector<DitWindow> dit_windows(int t, int h, int w, bool shifted);

}  // namespace wm::models::seedvr2
