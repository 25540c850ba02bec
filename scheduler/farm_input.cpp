#include "scheduler/farm_input.h"

#include <vector>

#include "scheduler/farm.h"
#include "scheduler/farm_assemble.h"
#include "scheduler/farm_journal.h"
#include "scheduler/farm_plan.h"
#include "scheduler/farm_run.h"
#include "scheduler/journal.h"
#include "scheduler/runner.h"
#include "scheduler/tasks.h"
#include "src/base/error.h"
#include "src/base/fs.h"

namespace wm::sched {

ChunkRunners::ChunkRunners(JobSpec job)
    : runners_(std::make_unique<farm::JobRunners>(std::move(job))) {}
ChunkRunners::~ChunkRunners() = default;
const JobSpec& ChunkRunners::job() const { return runners_->job(); }
TaskRunner& ChunkRunners::whole_runner() { return runners_->get(/*whole=*/true); }

std::string chunk_work_folder(const std::string& output) { return farm::farm_dir(output); }

InputChunksResult run_input_chunks(ChunkRunners& runners, const std::string& input,
                                   const std::string& output, const InputChunksOptions& given,
                                   Progress& progress) {
  farm::JobRunners& job_runners = *runners.runners_;
  const JobSpec& job = job_runners.job();
  if (fs::same_file(input, output)) {
    throw Error(output + ": output would overwrite its input", kExitDataErr);
  }
  const int64_t chunk_frames = given.chunk_frames > 0 ? given.chunk_frames : kDefaultChunkFrames;
  // Planned once, writing nothing: an input of one chunk needs no work folder. Tensor files
  // (upscale's .safetensors path) hold no video stream to cut; decode_latents' latents do.
  farm::Planner planner(chunk_frames, /*need_ranges=*/true, job_runners.traits());
  farm::PlannedInput in;
  in.input = input;
  in.output = output;
  in.plan = planner.plan(job, 0, input, output);
  const bool one_chunk = in.plan.whole || (in.plan.rule.causal && !farm::carries_state(job.task)) ||
                         in.plan.ranges.size() <= 1;
  InputChunksResult result;
  result.whole = one_chunk;
  result.chunks = one_chunk ? 1 : int64_t(in.plan.ranges.size());
  if (one_chunk) {
    // Not through farm::run_chunk: there a whole-input chunk is recorded in a journal (a work
    // folder, the chunk's lock and the output's lock) so that other farm tasks and `assemble`
    // see it done; here the caller's own record of the input says that (the watch queue and its
    // complete staging file), and nothing within one chunk could be resumed. So the plain run's
    // way, straight to `output`. (A chunk of a causal model whose task does not carry its state
    // decodes and runs every frame before it: chunking it would multiply the work.)
    RunOptions run;
    run.cancel = given.cancel;
    run.on_slice = [&given](int64_t, int64_t written) {
      if (given.on_slice) given.on_slice(written);
    };
    fs::remove_stale_temps(output);
    result.frames = job_runners.get(/*whole=*/true).process(input, output, run, progress);
  } else {
    planner.record(output, in.plan);  // the next call (after a kill) reads it back
    std::vector<Chunk> chunks;
    farm::add_chunks(chunks, in);
    FarmOptions options;
    options.chunk_frames = chunk_frames;
    options.cancel = given.cancel;
    const auto seen = [](const Chunk& c) {
      return InputChunk{c.range.first_frame, c.range.last_frame, c.input_frames};
    };
    farm::ChunkHooks hooks;
    if (given.on_chunk_start) {
      hooks.on_start = [&](const Chunk& c) { given.on_chunk_start(seen(c)); };
    }
    hooks.on_slice = given.on_slice;
    if (given.on_chunk_done) {
      hooks.on_done = [&](const Chunk& c, int64_t frames) { given.on_chunk_done(seen(c), frames); };
    }
    for (const Chunk& c : chunks) farm::run_chunk(c, options, hooks, progress, job_runners);
    farm::assemble_output(job, in, /*job_file=*/"", options);
    Journal journal(farm::journal_path(output), false);
    if (auto out = journal.output()) result.frames = out->frames;
  }
  // The output is complete and in place: the journal, locks and segments have served.
  farm::remove_farm_dir(output);
  return result;
}

}  // namespace wm::sched
