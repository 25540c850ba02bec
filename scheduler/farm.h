// Render-farm / cluster mode: a job file's inputs cut into chunks of frames that run as separate
// processes (farm tasks), each writing one segment, then assembled into the outputs by stream
// copy. The user guide is docs/farm.md; this header is the contract of the commands (tools/
// wmbatch.cpp, scheduler/slurm.cpp). Behind it, one file per stage, each the one owner of what it
// names: scheduler/farm_plan.* (chunk geometry, traits, the plans), farm_journal.* (the work
// folder: file names, fingerprints, locks, journal rows), farm_run.* (one chunk: task runners,
// the causal-state ledger), farm_assemble.* (an output from its segments); farm.cpp holds the
// commands. The watch daemon runs an input's chunks through scheduler/farm_input.h.
//
//   plan      plan_farm(): the chunks of every input of a job file (pure: writes nothing)
//   run       run_farm(): one chunk (--chunk N / --frames A-B), or every chunk then assemble
//   assemble  assemble_farm(): check every segment, concatenate, mux audio/subtitles, rename
//
// Chunk boundaries (plan_chunks):
//  - Frame-to-frame models (causal_state false: lanczos, bicubic, TorchScript upscalers): chunks
//    of `chunk_frames` (rounded to the model's frame group), no context frames.
//  - Models of independent overlapping batches (slice_overlap > 0: SeedVR2): chunks of whole
//    batches (k · stride frames, stride = batch − overlap), each after the first starting at a
//    seam; it also runs the batch before (context_before = stride) and reads the overlap after
//    its end (context_after), writing only its own frames: the seams come out as in a whole run.
//  - Causal models (causal_state true: the Wan VAE): the exact output of a frame depends on every
//    frame before it, so a chunk's context_before is ALL preceding frames (exact, at the cost of
//    decoding and running the model over the prefix: chunk k of n costs about k+1 chunks of work).
//    Boundaries fall on the job's slice boundaries (first chunk first_frames + j*slice_frames
//    frames — 1+4k for the VAE encoder —, later ones j*slice_frames), so every slice the model
//    sees is the one a single run sees.
//    reconstruct (the causal VAEs, video → video) carries the model state instead (CausalCarry in
//    scheduler/runner.h): in one process, an input's chunks run in order on one kept session, so
//    an uninterrupted chunked run costs what a whole run costs; after each chunk the session's
//    state is saved to "state-<last>.safetensors" in the work folder (scheduler/causal_state.h,
//    recorded in the journal with its size; the previous chunk's state is removed once this
//    chunk is recorded), and a chunk run by a later process (a resume after a kill, another farm
//    task) starts from that state when it is there and whole, else from the context frames.
//    decode_latents to video and encode_latents of a video (latent segments concatenated along
//    T at assembly: scheduler/latent_segments.h) carry it the same way.
//  - Tasks whose input or output is not a video stream (decode_latents to a tensor,
//    encode_latents of a tensor) are one whole-input chunk per input, written straight to the
//    output (farming by input).
//  - Every chunk is encoded by its own encoder, so each segment starts with an IDR frame and the
//    segments concatenate without re-encoding.
//
// Identity: a chunk's frames are bit-identical to the same frames of a single run for the
// built-in models; the encoded bits depend on where the encoder starts, so the guarantee is:
// assemble(run chunk 0..n-1 anywhere, in any order, interrupted or not) is byte-identical to
// `wmbatch run JOB.yaml` (the single-process run of the same chunks), and decodes to the same
// frames and pts as the plain `wmbatch JOB.yaml` when the codec is lossless; audio and subtitle
// packets are copied from the source exactly as the plain run copies them.
//
// Files, beside each output: "<output>.wmfarm/" holding journal.sqlite (scheduler/journal.h), the
// segments "seg-<first>-<last><ext>" (removed after assembly unless keep_segments) and lock files.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/progress.h"
#include "src/geometry.h"
#include "src/job_spec.h"
#include "src/model.h"

namespace wm::sched {

constexpr int64_t kDefaultChunkFrames = 240;

// How one input is cut (pure data, from the model's traits and the job).
struct ChunkRule {
  bool causal = false;       // context_before = every preceding frame
  int64_t first_frames = 0;  // frames of the first chunk
  int64_t frames = 0;        // frames of every later chunk (the last may be shorter)
  int64_t align_first = 0;   // chunk starts after 0 are align_first + k * align (k >= 0)
  int64_t align = 1;
  // Models with overlapping slices (ModelTraits::slice_overlap): a chunk after the first also
  // runs the slice before its first frame (context_before) and reads the frames its last slice
  // repeats into the next (context_after), so its seams are blended as a whole run blends them.
  int64_t context_before = 0;
  int64_t context_after = 0;
};

// `slices` is the job's slice rule for the model (scheduler/tasks.h job_slice_rule); chunk_frames
// <= 0 means kDefaultChunkFrames.
ChunkRule make_chunk_rule(const ModelTraits& traits, const SliceRule& slices, int64_t chunk_frames);

// decode_latents: chunks in output frames that hold whole slices of `slice_latents` latent frames
// (so every slice is the one a whole run decodes). `encoder`: the model's encode traits, whose
// frame grouping is the latent↔frame map (T latents decode to frame_offset + frame_group·(T−1)
// frames: Wan2.1 1 + 4(T−1)).
ChunkRule make_latent_chunk_rule(const ModelTraits& encoder, int64_t slice_latents,
                                 int64_t chunk_frames);

struct ChunkRange {
  int64_t first_frame = 0;
  int64_t last_frame = 0;  // inclusive
  int64_t context_before = 0;
  int64_t context_after = 0;
};

// The chunks of an input of `frames` frames; one chunk [0, -1] when frames <= 0 (unknown).
std::vector<ChunkRange> plan_chunks(int64_t frames, const ChunkRule& rule);

// The chunk for an explicit frame range [first, last] (last clamped to frames-1). Throws
// wm::Error(kExitDataErr) when the range does not start/end on a boundary the rule allows.
ChunkRange range_chunk(int64_t first, int64_t last, int64_t frames, const ChunkRule& rule);

struct Chunk {
  int64_t index = 0;  // over every job and input of the job file, in order
  size_t job = 0;     // index in FarmPlan::jobs
  std::string input;
  std::string output;
  int64_t input_frames = 0;  // 0 when unknown (whole-input chunks)
  ChunkRange range;
  bool whole_input = false;  // written straight to `output` by the task runner (no assembly)
  std::string segment;       // segment path (empty for whole-input chunks)
};

struct FarmPlan {
  std::string job_file;
  int64_t chunk_frames = kDefaultChunkFrames;
  std::vector<JobSpec> jobs;
  std::vector<Chunk> chunks;
};

struct FarmOptions {
  int64_t chunk_frames = 0;  // 0: kDefaultChunkFrames
  ProgressStyle progress = ProgressStyle::kAuto;
  const std::atomic<bool>* cancel = nullptr;
  bool keep_segments = false;  // assemble: leave the segments in place (and the journal)
  // Keep `<output>.wmfarm/` (the journal) once the output is assembled; by default it goes.
  bool keep_journal = false;
};

// Loads and validates the job file (ConfigError → 65) and plans every input. Reads cached frame
// counts from existing journals; creates nothing.
FarmPlan plan_farm(const std::string& job_file, const FarmOptions& options);
std::string plan_json(const FarmPlan& plan);

// Which chunk a `run` processes.
struct ChunkSelection {
  std::optional<int64_t> chunk;                       // --chunk N
  std::optional<std::pair<int64_t, int64_t>> frames;  // --frames A-B (inclusive)
};

// The chunk index from the environment of a farm task: SLURM_ARRAY_TASK_ID, else
// JOB_COMPLETION_INDEX (Kubernetes indexed jobs); nullopt when neither is set.
std::optional<int64_t> chunk_from_environment();

// Runs the selected chunk, or (nothing selected) every chunk in order and then assembles every
// output. Returns the exit code: 0 done or already done, 65 bad job/input/range, 75 interrupted
// (rerun resumes), other codes per docs/exit-codes.md. Never throws wm::Error.
int run_farm(const std::string& job_file, const ChunkSelection& selection,
             const FarmOptions& options);

// Assembles every output of the job file from its segments. Same exit codes; 1 when chunks are
// missing (run them, then assemble again).
int assemble_farm(const std::string& job_file, const FarmOptions& options);

// A stable hash (hex) of every job setting that can change an output's bits: what farm chunks
// and the watch-folder queue (watch/queue.h) record with the input's size and mtime.
std::string job_settings_hash(const JobSpec& job);

// Parses "A-B" (inclusive, A <= B). Throws wm::Error(kExitUsage).
std::pair<int64_t, int64_t> parse_frame_range(const std::string& text);

}  // namespace wm::sched
