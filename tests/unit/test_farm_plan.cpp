// Farm chunk geometry and Slurm scripts (scheduler/farm.h, scheduler/slurm.h): pure functions.
#include <gtest/gtest.h>

#include <cstdlib>

#include "scheduler/farm.h"
#include "scheduler/fingerprint.h"
#include "scheduler/slurm.h"
#include "src/base/error.h"

namespace wm::sched {
namespace {

ModelTraits stateless() { return ModelTraits{}; }

ModelTraits wan_encoder() {
  ModelTraits t;
  t.causal_state = true;
  t.frame_group = 4;
  t.frame_offset = 1;
  return t;
}

int64_t total(const std::vector<ChunkRange>& chunks) {
  int64_t n = 0;
  for (const ChunkRange& c : chunks) n += c.last_frame - c.first_frame + 1;
  return n;
}

void expect_contiguous(const std::vector<ChunkRange>& chunks, int64_t frames) {
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks.front().first_frame, 0);
  for (size_t i = 1; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].first_frame, chunks[i - 1].last_frame + 1) << "chunk " << i;
  }
  EXPECT_EQ(chunks.back().last_frame, frames - 1);
  EXPECT_EQ(total(chunks), frames);
}

TEST(FarmPlan, StatelessModelsCutEvenChunksWithoutContext) {
  const ChunkRule rule = make_chunk_rule(stateless(), make_slice_rule(16, 1, 0), 10);
  EXPECT_FALSE(rule.causal);
  const auto chunks = plan_chunks(35, rule);
  ASSERT_EQ(chunks.size(), 4u);
  expect_contiguous(chunks, 35);
  EXPECT_EQ(chunks[3].first_frame, 30);
  for (const ChunkRange& c : chunks) {
    EXPECT_EQ(c.context_before, 0);
    EXPECT_EQ(c.context_after, 0);
  }
}

TEST(FarmPlan, DefaultChunkSize) {
  const auto chunks = plan_chunks(1000, make_chunk_rule(stateless(), make_slice_rule(16, 1, 0), 0));
  EXPECT_EQ(chunks.front().last_frame + 1, kDefaultChunkFrames);
  expect_contiguous(chunks, 1000);
}

// Wan encoder: latent groups 1 + 4k then 4k, on slice boundaries; the context is the whole prefix.
TEST(FarmPlan, CausalModelsAlignToSlicesAndLatentGroups) {
  const ChunkRule rule =
      make_chunk_rule(wan_encoder(), make_slice_rule(8, 4, 1), /*chunk_frames=*/20);
  EXPECT_TRUE(rule.causal);
  // Slices: 1 + 8 first, then 8; chunks of two slices (16 frames): 9 + 8 = 17 first.
  EXPECT_EQ(rule.first_frames, 17);
  EXPECT_EQ(rule.frames, 16);
  const auto chunks = plan_chunks(61, rule);
  expect_contiguous(chunks, 61);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].last_frame + 1, 17);  // 1 + 4k
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRange& c = chunks[i];
    EXPECT_EQ(c.context_before, c.first_frame) << "all preceding frames";
    EXPECT_EQ(c.context_after, 0);
    if (i > 0) {
      EXPECT_EQ((c.first_frame - 1) % 4, 0) << "latent group boundary";
    }
    if (i + 1 < chunks.size()) {
      EXPECT_EQ((c.last_frame + 1 - c.first_frame) % 4, i == 0 ? 1 : 0);
    }
  }
}

TEST(FarmPlan, ChunkSmallerThanASliceIsOneSlice) {
  const ChunkRule rule = make_chunk_rule(wan_encoder(), make_slice_rule(16, 4, 1), 3);
  EXPECT_EQ(rule.first_frames, 17);
  EXPECT_EQ(rule.frames, 16);
}

// decode_latents: output frames on latent slice boundaries (T latents decode to 1 + 4(T-1)
// frames for the Wan encoder's grouping).
TEST(FarmPlan, LatentChunksHoldWholeLatentSlices) {
  // Slices of 3 latents: 9 frames first, 12 after; chunks of two slices (chunk_frames 30 / 12).
  const ChunkRule rule = make_latent_chunk_rule(wan_encoder(), 3, 30);
  EXPECT_TRUE(rule.causal);
  EXPECT_EQ(rule.first_frames, 1 + 4 * (6 - 1));
  EXPECT_EQ(rule.frames, 24);
  EXPECT_EQ(rule.align_first, 9);
  EXPECT_EQ(rule.align, 12);
  const auto chunks = plan_chunks(1 + 4 * 16, rule);  // 17 latents
  expect_contiguous(chunks, 65);
  ASSERT_EQ(chunks.size(), 3u);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const int64_t latents_before = (chunks[i].last_frame + 1 - 1) / 4 + 1;
    EXPECT_EQ((chunks[i].last_frame + 1 - 1) % 4, 0) << "a latent boundary";
    EXPECT_EQ(latents_before % 3, 0) << "a slice boundary";
  }
  // A chunk smaller than a slice's frames is one slice.
  EXPECT_EQ(make_latent_chunk_rule(wan_encoder(), 3, 5).first_frames, 9);
}

TEST(FarmPlan, UnknownLengthIsOneOpenChunk) {
  const auto chunks = plan_chunks(0, make_chunk_rule(stateless(), make_slice_rule(16, 1, 0), 10));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].first_frame, 0);
  EXPECT_EQ(chunks[0].last_frame, -1);
}

TEST(FarmPlan, ExplicitRanges) {
  const ChunkRule free_rule = make_chunk_rule(stateless(), make_slice_rule(16, 1, 0), 10);
  ChunkRange r = range_chunk(3, 7, 20, free_rule);
  EXPECT_EQ(r.first_frame, 3);
  EXPECT_EQ(r.last_frame, 7);
  EXPECT_EQ(r.context_before, 0);
  // Past the end: clamped.
  EXPECT_EQ(range_chunk(10, 100, 20, free_rule).last_frame, 19);
  EXPECT_THROW(range_chunk(20, 25, 20, free_rule), Error);

  const ChunkRule causal = make_chunk_rule(wan_encoder(), make_slice_rule(8, 4, 1), 16);
  r = range_chunk(17, 32, 61, causal);
  EXPECT_EQ(r.context_before, 17);
  try {
    range_chunk(16, 32, 61, causal);
    FAIL() << "16 is inside a latent group";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("nearest: 9 or 17"), std::string::npos) << e.what();
  }
  EXPECT_THROW(range_chunk(17, 30, 61, causal), Error) << "must end on a boundary";
  EXPECT_EQ(range_chunk(49, 70, 61, causal).last_frame, 60) << "the end is always a boundary";
}

TEST(FarmPlan, ParseFrameRange) {
  EXPECT_EQ(parse_frame_range("0-9"), std::make_pair(int64_t(0), int64_t(9)));
  EXPECT_EQ(parse_frame_range("120-120"), std::make_pair(int64_t(120), int64_t(120)));
  for (const char* bad : {"9-0", "a-b", "5", "-1-3", "1-2x", ""}) {
    try {
      parse_frame_range(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage) << bad;
    }
  }
}

TEST(FarmPlan, ChunkFromEnvironment) {
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  ::unsetenv("JOB_COMPLETION_INDEX");
  EXPECT_FALSE(chunk_from_environment());
  ::setenv("JOB_COMPLETION_INDEX", "4", 1);
  EXPECT_EQ(chunk_from_environment(), 4);
  ::setenv("SLURM_ARRAY_TASK_ID", "7", 1);  // Slurm first
  EXPECT_EQ(chunk_from_environment(), 7);
  ::setenv("SLURM_ARRAY_TASK_ID", "x", 1);
  EXPECT_THROW(chunk_from_environment(), Error);
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  ::unsetenv("JOB_COMPLETION_INDEX");
}

TEST(Slurm, ShellQuote) {
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

TEST(Slurm, Scripts) {
  FarmPlan plan;
  plan.chunk_frames = 32;
  plan.jobs.resize(1);
  plan.chunks.resize(5);
  SlurmOptions o;
  o.wmbatch = "/opt/wm/wmbatch";
  o.partition = "gpu";
  o.gpus_per_task = 1;
  o.max_parallel = 2;
  o.time_limit = "01:00:00";
  o.log_dir = "/logs";
  o.max_retries = 3;
  const SlurmScripts s = make_slurm_scripts(plan, "/jobs/my job.yaml", o);
  EXPECT_EQ(s.chunks, 5);
  const std::string& a = s.array_script;
  for (const char* want : {"#!/bin/bash\n", "#SBATCH --array=0-4%2\n", "#SBATCH --requeue\n",
                           "#SBATCH --signal=B:USR1@120\n", "#SBATCH --partition=gpu\n",
                           "#SBATCH --gpus-per-task=1\n", "#SBATCH --time=01:00:00\n",
                           "#SBATCH --open-mode=append\n", "#SBATCH --output=/logs/%x-%A_%a.out\n",
                           "wmbatch='/opt/wm/wmbatch'", "job='/jobs/my job.yaml'",
                           "--chunk \"$SLURM_ARRAY_TASK_ID\" --chunk-frames 32 --progress farm",
                           "scontrol requeue \"$task\"", "-lt 3 ]", "64|65|66|73)"}) {
    EXPECT_NE(a.find(want), std::string::npos) << want << "\n" << a;
  }
  const std::string& b = s.assemble_script;
  EXPECT_NE(b.find("exec '/opt/wm/wmbatch' assemble '/jobs/my job.yaml'"), std::string::npos) << b;
  EXPECT_EQ(b.find("--array"), std::string::npos);
  EXPECT_EQ(b.find("--gpus-per-task"), std::string::npos) << "assembling needs no GPU";

  // CPU jobs get no GPUs by default; the default chunk size is not repeated.
  plan.chunk_frames = kDefaultChunkFrames;
  plan.jobs[0].devices = "cpu";
  o.gpus_per_task = -1;
  o.max_parallel = 0;
  const SlurmScripts cpu = make_slurm_scripts(plan, "/j.yaml", o);
  EXPECT_EQ(cpu.array_script.find("--gpus-per-task"), std::string::npos);
  EXPECT_EQ(cpu.array_script.find("--chunk-frames"), std::string::npos);
  EXPECT_NE(cpu.array_script.find("#SBATCH --array=0-4\n"), std::string::npos);
  plan.jobs[0].devices = "auto";
  EXPECT_NE(make_slurm_scripts(plan, "/j.yaml", o).array_script.find("--gpus-per-task=1"),
            std::string::npos);

  // Chunks that carry a causal model's state (context before them) run one at a time, in order,
  // unless --max-parallel says otherwise.
  plan.chunks[3].range.first_frame = 96;
  plan.chunks[3].range.context_before = 96;
  EXPECT_NE(make_slurm_scripts(plan, "/j.yaml", o).array_script.find("#SBATCH --array=0-4%1\n"),
            std::string::npos);
  o.max_parallel = 3;
  EXPECT_NE(make_slurm_scripts(plan, "/j.yaml", o).array_script.find("#SBATCH --array=0-4%3\n"),
            std::string::npos);
}

// The farm fingerprint is derived from the whole validated job: changing any key that can change
// the output's bits is noticed (a rerun redoes the chunks instead of reusing stale segments);
// keys that only choose inputs, outputs or scheduling are not part of it.
TEST(FarmFingerprint, EveryKeyThatChangesTheOutputIsNoticed) {
  const std::string base =
      "task: upscale\ninput: a.mp4\noutput: out/{stem}.mkv\nmodel: {kind: lanczos, scale: 2}\n"
      "encode:\n  codec: libx264\n  crf: 18\n  preset: medium\n  options:\n    tune: film\n";
  const auto text = [](const std::string& yaml) {
    return job_settings_text(parse_job_text(yaml, "/jobs/job.yaml").at(0));
  };
  const std::string reference = text(base);
  EXPECT_EQ(text(base), reference) << "stable";
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string yaml = base;
    const size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return yaml.replace(at, from.size(), to);
  };
  for (const std::string& changed : {
           with("tune: film", "tune: grain"),            // encode.options value
           with("tune: film", "tune: film\n    g: 12"),  // an option more
           with("crf: 18", "crf: 20"),
           with("preset: medium", "preset: slow"),
           with("codec: libx264", "codec: libx265"),
           with("crf: 18", "crf: 18\n  pix_fmt: yuv444p"),
           with("crf: 18", "crf: 18\n  threads: 2"),
           with("crf: 18", "crf: 18\n  audio: none"),
           with("crf: 18", "crf: 18\n  subtitles: none"),
           with("scale: 2", "scale: 3"),
           with("kind: lanczos", "kind: bicubic"),
           base + "tiling: {tile: 64, overlap: 8}\n",
           base + "slice_frames: 4\n",
           base + "max_error_rate: 0.1\n",
           base + "devices: auto\n",
       }) {
    EXPECT_NE(text(changed), reference) << changed;
  }
  // Precision, for a kind that runs more than fp32 (lanczos runs fp32 only).
  const std::string neural =
      with("kind: lanczos, scale: 2", "kind: realesrgan, weights: m.pth") + "devices: auto\n";
  EXPECT_NE(text(neural + "precision: bf16\n"), text(neural));
  // Scheduling, inputs and outputs do not change a segment's bits.
  for (const std::string& same : {
           base + "tokens: 7\n",
           base + "on_exists: overwrite\n",
           base + "job: other\n",
           base + "decode: auto\n",
           base + "offload: {pinned_mib: 64}\n",
           with("input: a.mp4", "input: b.mp4"),
           with("out/{stem}.mkv", "elsewhere/{stem}.mkv"),
       }) {
    EXPECT_EQ(text(same), reference) << same;
  }
}

}  // namespace
}  // namespace wm::sched
