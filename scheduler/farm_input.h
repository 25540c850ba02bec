// One input run as farm chunks in this process: the resumable path of `wmbatch watch`
// (watch/worker.cpp). The whole of the farm the watch daemon sees; the farm's stages (plan,
// journal, run, assemble: scheduler/farm_*.h) stay behind it. The CLI's farm is scheduler/farm.h.
//
// Crash safety: the work folder "<output>.wmfarm/" (the farm journal, segments, locks) is the
// record of the chunks of `output`, as for `wmbatch run`: a call after an interrupted one (SIGKILL,
// Cancelled) keeps every chunk that finished and redoes only the others. The caller keeps its own
// record of the input as a whole (the watch queue) and owns `output`; it never reads the journal.
//
// Threading: a ChunkRunners is used by one thread at a time; distinct ones run in parallel.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "scheduler/progress.h"
#include "src/job_spec.h"

namespace wm::sched {

class TaskRunner;
namespace farm {
class JobRunners;
}

// A chunk of the input, as the hooks see it.
struct InputChunk {
  int64_t first_frame = 0;
  int64_t last_frame = 0;    // inclusive; -1: to the end of the input
  int64_t input_frames = 0;  // of the whole input; 0 when unknown
};

struct InputChunksOptions {
  int64_t chunk_frames = 0;  // 0: the farm's default (scheduler/farm.h kDefaultChunkFrames)
  const std::atomic<bool>* cancel = nullptr;
  // Called on the running thread: a chunk's work starts (not called for a chunk found finished),
  // a slice of the input was written (frames of the chunk so far; of the input for an input of
  // one chunk), a chunk is finished — by this call or found finished by an earlier one (`frames`
  // in its segment). An input of one chunk calls on_slice only.
  std::function<void(const InputChunk&)> on_chunk_start;
  std::function<void(int64_t frames_written)> on_slice;
  std::function<void(const InputChunk&, int64_t frames)> on_chunk_done;
};

// What run_input_chunks made.
struct InputChunksResult {
  int64_t frames = 0;  // in the output
  int64_t chunks = 0;  // of the input's plan
  bool whole = false;  // run whole, straight to the output (no resume within the input)
};

class ChunkRunners;

// `input` of `runners.job()` run as chunks, then assembled into `output`. Planned once (the frame
// count and chunks read from the work folder's journal when an earlier call recorded them).
// Chunks as `wmbatch run` cuts them with options.chunk_frames (reconstruct and the latent tasks:
// with the model state carried from chunk to chunk, scheduler/farm.h). An input of one chunk —
// short, a causal model whose task does not carry its state (a chunk of it decodes every frame
// before it: chunking would multiply the work), a task that farms by input — runs whole, straight
// to `output`, as a plain run does, with no work folder: there is nothing to resume within it (a
// rerun redoes it). After success the work folder is removed. The caller owns `output`: nothing
// else may write it (no lock is taken; on_exists is the caller's). Throws wm::Error (Cancelled on
// request: the finished chunks stay for the next call).
InputChunksResult run_input_chunks(ChunkRunners& runners, const std::string& input,
                                   const std::string& output, const InputChunksOptions& options,
                                   Progress& progress);

// The models of one job for its inputs' chunks, loaded on first use and kept across inputs, and
// the model's traits for planning (read once per ChunkRunners, from a model built on the CPU).
class ChunkRunners {
 public:
  explicit ChunkRunners(JobSpec job);
  ~ChunkRunners();
  ChunkRunners(const ChunkRunners&) = delete;
  ChunkRunners& operator=(const ChunkRunners&) = delete;
  const JobSpec& job() const;
  // The runner of a plain, unchunked run of a whole input (audio and subtitles as the job says);
  // run_input_chunks uses it too, for an input of one chunk.
  TaskRunner& whole_runner();

 private:
  friend InputChunksResult run_input_chunks(ChunkRunners&, const std::string&, const std::string&,
                                            const InputChunksOptions&, Progress&);
  std::unique_ptr<farm::JobRunners> runners_;
};

// The work folder of an output's chunks ("<output>.wmfarm").
std::string chunk_work_folder(const std::string& output);

}  // namespace wm::sched
