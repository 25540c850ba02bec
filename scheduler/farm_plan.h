// Farm stage "plan": which inputs of a job run as chunks, and where each chunk starts and ends.
// Internal to the farm (scheduler/farm*.cpp); the CLI contract is scheduler/farm.h (the pure chunk
// geometry, plan_farm, plan_json), the watch daemon's scheduler/farm_input.h.
//
// Owns: the chunk geometry (make_chunk_rule … range_chunk), the model traits read for planning
// (TraitsCache, owned by whoever plans: no process-wide cache), the plan of one input (Planner) and
// of a job file (build_plan). Planning reads an input's frame count and chunks from its output's
// journal when an earlier run recorded them; it writes nothing: Planner::record does, once the
// caller knows the input runs as chunks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler/farm.h"
#include "src/job_spec.h"
#include "src/model.h"

namespace wm::sched::farm {

// An input run in chunks: a video (or, for decode_latents, a latent file) to a video, or for
// encode_latents a video to a latent file (segments of latents: scheduler/latent_segments.h).
bool chunked_input(const JobSpec& job, const std::string& input, const std::string& output);

// Chunked tasks of causal models whose runner carries the model state from chunk to chunk
// (RunOptions::carry: a session kept in memory, a state file saved after each chunk).
bool carries_state(Task task);

// The models' traits for planning, by job index, read on first use from a model built on the CPU
// only for them (the weights are checked on the way; decode_latents reads the encoder's, whose
// frame grouping maps latents to frames). One thread at a time.
class TraitsCache {
 public:
  const ModelTraits& of(const JobSpec& job, size_t job_index);

 private:
  std::map<size_t, ModelTraits> traits_;
};

// The plan of one input.
struct InputPlan {
  bool whole = false;  // not run in chunks (chunked_input false): one whole-input chunk
  int64_t frames = 0;  // of the input (decode_latents: of the output); 0 when unknown
  ChunkRule rule;
  std::vector<ChunkRange> ranges;
  // Journal cache entries this plan computed rather than read (Planner::record writes them).
  std::string frames_key, plan_key;
};

// Plans inputs, with two caches in each output's journal: the input's frame count (keyed by the
// input's path, size and mtime) and its chunks (keyed by the whole fingerprint and chunk size).
class Planner {
 public:
  // need_ranges false (assembly): the frame count only, as one range.
  Planner(int64_t chunk_frames, bool need_ranges, TraitsCache& traits)
      : chunk_frames_(chunk_frames), need_ranges_(need_ranges), traits_(traits) {}
  // Reads the caches of an existing journal; creates nothing.
  InputPlan plan(const JobSpec& job, size_t job_index, const std::string& input,
                 const std::string& output);
  // Writes what plan() computed into the output's journal (creating the work folder), so the
  // other farm tasks and later runs read it instead of counting frames again.
  void record(const std::string& output, const InputPlan& plan);

 private:
  int64_t chunk_frames_;
  bool need_ranges_;
  TraitsCache& traits_;
};

struct PlannedInput {
  size_t job = 0;
  std::string input;
  std::string output;
  InputPlan plan;
  std::vector<size_t> chunks;  // indices into the chunk list (= their Chunk::index)
};

// Appends the chunks of a planned input to `chunks` (FarmPlan::chunks), numbered on.
void add_chunks(std::vector<Chunk>& chunks, PlannedInput& in);

// Loads and validates the job file, plans every input (`record`: and records the plans in the
// journals). Throws wm::Error.
FarmPlan build_plan(const std::string& job_file, int64_t chunk_frames, bool record,
                    bool need_ranges, std::vector<PlannedInput>* inputs_out = nullptr);

// The chunk size earlier runs of this job file planned with (`plan 1 <fingerprint> chunk_frames
// N` in its outputs' journals), for a `run` given no --chunk-frames: every farm task of a plan
// must cut the same chunks. 0 when no journal says; Error (64) when journals disagree.
int64_t journal_chunk_frames(const std::string& job_file);

}  // namespace wm::sched::farm
