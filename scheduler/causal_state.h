// Causal state snapshots of farm chunks: the model session's state after a chunk's last frame
// (ModelSession::export_state), saved beside the segments so that a later run resumes the next
// chunk from it instead of running the model over every frame before that chunk.
//
// File: safetensors (src/weights/safetensors.h), written atomically (temp, fsync, rename), one
// tensor per StateTensor in its own dtype and shape, and metadata: "wmbatch_state" (format
// version), the sequence it belongs to (input fingerprint and settings), the frame it continues at,
// the channels-last tensors, and a 64-bit checksum over every name, dtype, shape and byte.
// load_causal_state() accepts only a file whose size, sequence, frame and checksum all match, so a
// truncated, corrupt or foreign file is refused (the caller then recomputes the prefix).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::sched {

// Writes the state to `path`. Returns the file's size. Throws OutputError.
int64_t save_causal_state(const std::string& path, const std::vector<StateTensor>& tensors,
                          const std::string& sequence, int64_t next_frame);

// The state at `path` when it is whole and belongs to (sequence, next_frame) (and, when
// expected_size >= 0, has that size); nullopt otherwise, with the reason in `why`. Never throws
// for a bad file.
std::optional<std::vector<StateTensor>> load_causal_state(const std::string& path,
                                                          const std::string& sequence,
                                                          int64_t next_frame, int64_t expected_size,
                                                          std::string* why);

// Tensors whose names start with `prefix`, with the prefix removed (a composite session's part).
std::vector<StateTensor> state_part(const std::vector<StateTensor>& all, const std::string& prefix);

}  // namespace wm::sched
