// The host's encoder ceiling for a batch (wmbench upscale --devices): a job's output videos
// decoded into memory first (once, not timed), then encoded again with the job's encoder settings
// in as many lanes as the job ran inputs at once, each lane its share of the videos one after
// another (feeding the next while the last one's encoder drains, as the job's lanes do). What it
// times is the encoder alone (and one copy of each picture into the encoder's
// buffer): a job of that output can approach it, not pass it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/video_writer.h"

namespace wm::bench {

struct EncodeCeiling {
  double seconds = 0;
  double cpu_seconds = 0;  // the process's user + system time over those seconds
  int64_t frames = 0;
  int lanes = 1;
  std::string skipped;  // why it was not measured (a pixel format the encoder does not take
                        // as it is); empty when measured
};

// Videos decoded into memory once, for several ceilings (thread splits) over the same pictures.
struct DecodedClip;
struct DecodedVideos {
  std::vector<std::shared_ptr<const DecodedClip>> clips;
};
// Decodes `videos` in up to `threads` at once (a lossless 4K batch took longer to decode, one
// video after another, than to encode). Throws wm::Error for an unreadable video.
DecodedVideos decode_videos(const std::vector<std::string>& videos, int threads);

// Encodes the decoded videos again into `out_dir` (STEM.mp4 each) with `settings` in `lanes`
// lanes. Throws wm::Error for a failing encoder.
EncodeCeiling encode_ceiling(const DecodedVideos& videos, const std::string& out_dir, int lanes,
                             const io::EncodeSettings& settings);

}  // namespace wm::bench
