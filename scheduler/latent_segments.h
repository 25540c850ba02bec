// encode_latents in farm chunks (docs/farm.md): each chunk of the source video writes its
// latents to a segment "seg-<first>-<last>.safetensors" holding the tensors a whole run writes
// ("latent", and "latent_logvar" when asked for; [1, C, T, H, W] float32) over the chunk's frames,
// with the whole run's metadata for those frames ("frames": the chunk's input frames,
// "latent_frames": its latents). Assembly concatenates them along T into the file a whole run
// writes, byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/segments.h"

namespace wm::sched {

// A latent segment's frames, as probe_segment gives a video segment's: `frames` input frames
// (its "frames" metadata), pts first_frame .. first_frame + frames - 1. Throws wm::Error when the
// file is not a whole latent segment (its tensors disagree with its "latent_frames").
io::SegmentInfo probe_latent_segment(const std::string& path, int64_t first_frame);

// Concatenates the segments (in order) along T into `output`, with the first segment's metadata
// and "frames"/"latent_frames" summed: written to a temp file, `before_rename(temp)` called, then
// renamed over `output`. Returns the latent frames written. Throws wm::Error.
int64_t concat_latent_segments(const std::vector<std::string>& segments, const std::string& output,
                               const std::function<void(const std::string&)>& before_rename);

}  // namespace wm::sched
