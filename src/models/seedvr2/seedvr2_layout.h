// SeedVR2 video VAE: the architecture facts and the checkpoint key layout, apart from the math
// (seedvr2_blocks.*). The official checkpoint is `VideoAutoencoderKLWrapper`'s state_dict
// (../shared/seedvr2-vae-spec.md §3–4; every key and shape: tests/data/golden/seedvr2-tiny/
// keys_full.txt). Smaller models keep the official structure (4 levels, 2 resnets per encoder
// block, 3 per decoder block, temporal resampling in the two innermost steps) with other channel
// widths; infer_architecture reads the widths from a checkpoint's shapes.
//
// Torch-free; internal to src/models/ (and tests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wm::models::seedvr2 {

struct Architecture {
  int in_channels = 3;                                   // RGB in (encoder) and out (decoder)
  int latent_channels = 16;                              // the encoder writes 2× (mean, logvar)
  std::vector<int64_t> channels = {128, 256, 512, 512};  // block_out_channels
  int layers_per_block = 2;                              // encoder resnets; decoder has one more
  int temporal_scale_num = 2;                            // temporal resampling steps
  int norm_groups = 32;                                  // GroupNorm groups (official 32)

  int levels() const { return int(channels.size()); }
  // Encoder down block i has a downsampler when i < levels − 1; it is temporal too when
  // i ≥ levels − temporal_scale_num − 1 (the innermost steps).
  bool down_temporal(int i) const { return i >= levels() - temporal_scale_num - 1; }
  // Decoder up block i (outermost last) upsamples when i < levels − 1; temporally when
  // i < temporal_scale_num.
  bool up_temporal(int i) const { return i < temporal_scale_num; }
  int spatial_factor() const { return 1 << (levels() - 1); }
  int temporal_factor() const { return 1 << temporal_scale_num; }
  // Throws ModelError when the widths or groups do not fit (groups must divide every width).
  void validate() const;
  std::string str() const;  // "channels [128, 256, 512, 512], latent 16, 32 groups"
};

// One parameter of the checkpoint.
struct ParamSpec {
  std::string key;
  std::vector<int64_t> shape;
  bool decoder = false;  // decoder.* (else encoder.*)
};

// Every parameter of the architecture, in the official state_dict order (encoder, then decoder;
// in the decoder the up blocks come before the mid block, and in each mid block the attention
// before the resnets).
std::vector<ParamSpec> layout(const Architecture& arch);

// The shape of a key in a checkpoint, or nullptr when the checkpoint lacks it.
using ShapeOf = std::function<const std::vector<int64_t>*(const std::string& key)>;

// The architecture of a checkpoint: the official structure with the widths its shapes show.
// Each width is the value most of the keys that carry it agree on (so one mis-shaped key is
// reported as mis-shaped rather than taken for the width; ties go to the `decoder` half's keys
// when `decoder`, else the encoder's); a width no key shows keeps the official value (the layout
// check then names the missing keys). Never throws: the caller compares the whole layout with
// the file and reports the differences.
Architecture infer_architecture(const ShapeOf& shape_of, bool decoder, int norm_groups);

}  // namespace wm::models::seedvr2
