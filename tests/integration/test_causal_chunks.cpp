// reconstruct (the causal VAEs: Wan2.1, SeedVR2) in farm chunks (docs/farm.md, "Causal models"),
// with the tiny golden weights of tests/data. What is checked, exactly:
//  - the single-process chunked run (`wmbatch run JOB --chunk-frames 8`: one session kept from
//    chunk to chunk) and chunks run as separate processes (each resumed from the state file the
//    chunk before saved) decode to the whole-file run's frames and pts (lossless ffv1), and the
//    two chunked outputs are byte-identical;
//  - a damaged (bit flip) or truncated state file is refused with a warning and the chunk rebuilds
//    the state from frame 0 instead: still the same frames;
//  - SIGKILL after a chunk finished, rerun: byte-identical to the uninterrupted chunked run; the
//    finished chunks are not redone and the first chunk the rerun works on starts from the saved
//    state, not from the prefix; the same through `wmbatch watch` (the queue's chunk rows say no
//    finished chunk started again).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/integration/test_causal_helpers.h"
#include "tests/integration/test_farm_helpers.h"
#include "tests/integration/test_watch_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

std::string job(const std::string& kind, const std::string& input, const std::string& output) {
  return "task: reconstruct\ninput: " + input + "\noutput: " + output + "\n" +
         causal_model_yaml(kind) + "encode: {codec: ffv1, pix_fmt: yuv444p}\n";
}

void make_input(const std::string& path, int frames, int width = 64, int height = 48) {
  ClipSpec spec;
  spec.width = width;
  spec.height = height;
  spec.frames = frames;
  make_clip(path, spec);
}

std::string state_file(const std::string& output, int last_frame) {
  char name[64];
  std::snprintf(name, sizeof name, "/state-%08d.safetensors", last_frame);
  return output + ".wmfarm" + name;
}

// 25 frames in chunks of 8 (slices 5, 4, 4, ...): chunks 0-8, 9-16, 17-24.
class CausalChunks : public ::testing::TestWithParam<std::string> {};

TEST_P(CausalChunks, ChunksEqualTheWholeRun) {
  const std::string kind = GetParam();
  TempDir dir("causal-chunks");
  make_input(dir.file("in.mp4"), 25);
  write_text(dir.file("plain.yaml"), job(kind, "in.mp4", "plain.mkv"));
  write_text(dir.file("chunked.yaml"), job(kind, "in.mp4", "chunked.mkv"));
  write_text(dir.file("split.yaml"), job(kind, "in.mp4", "split.mkv"));
  CommandResult plain = wmbatch({dir.file("plain.yaml")});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  CommandResult plan = wm({"plan", dir.file("chunked.yaml"), "--chunk-frames", "8"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(count(plan.output, "\"whole_input\": false"), 3) << plan.output;

  // One process: the session goes on from chunk to chunk (no prefix is run again).
  CommandResult chunked =
      wm({"run", dir.file("chunked.yaml"), "--chunk-frames", "8", "--progress", "none"});
  ASSERT_EQ(chunked.exit_code, 0) << chunked.output;
  EXPECT_EQ(count(chunked.output, "continued the model state in memory"), 2) << chunked.output;
  EXPECT_EQ(count(chunked.output, "rebuilt the model state"), 0) << chunked.output;
  expect_same_frames(dir.file("chunked.mkv"), dir.file("plain.mkv"), 25);
  EXPECT_FALSE(exists(state_file(dir.file("chunked.mkv"), 8))) << "states go with the segments";

  // One process per chunk: each later chunk starts from the state the one before saved, which
  // goes once that chunk is recorded.
  for (int chunk = 0; chunk < 3; ++chunk) {
    CommandResult r = wm({"run", dir.file("split.yaml"), "--chunk-frames", "8", "--chunk",
                          std::to_string(chunk), "--progress", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (chunk > 0) {
      EXPECT_EQ(count(r.output, "started from the saved model state"), 1) << r.output;
      EXPECT_FALSE(exists(state_file(dir.file("split.mkv"), 8 * chunk)));
    }
    if (chunk < 2) {
      EXPECT_TRUE(exists(state_file(dir.file("split.mkv"), 8 + 8 * chunk)));
    }
  }
  CommandResult assemble = wm({"assemble", dir.file("split.yaml")});
  ASSERT_EQ(assemble.exit_code, 0) << assemble.output;
  EXPECT_TRUE(same_bytes(dir.file("split.mkv"), dir.file("chunked.mkv")));
  expect_same_frames(dir.file("split.mkv"), dir.file("plain.mkv"), 25);
}

INSTANTIATE_TEST_SUITE_P(Models, CausalChunks, ::testing::Values("wan", "seedvr2"));

TEST(CausalChunks, DamagedStateFallsBackToThePrefix) {
  TempDir dir("causal-damaged");
  make_input(dir.file("in.mp4"), 25);
  write_text(dir.file("plain.yaml"), job("wan", "in.mp4", "plain.mkv"));
  write_text(dir.file("farm.yaml"), job("wan", "in.mp4", "farm.mkv"));
  ASSERT_EQ(wmbatch({dir.file("plain.yaml")}).exit_code, 0);
  auto run_chunk = [&](int chunk) {
    return wm({"run", dir.file("farm.yaml"), "--chunk-frames", "8", "--chunk",
               std::to_string(chunk), "--progress", "none"});
  };
  ASSERT_EQ(run_chunk(0).exit_code, 0);
  // One bit flipped in the data area: same size, other values.
  const std::string first = state_file(dir.file("farm.mkv"), 8);
  std::string bytes = read_text(first);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() - 5] ^= 0x04;
  write_text(first, bytes);
  CommandResult r = run_chunk(1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("is not usable (checksum"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "rebuilt the model state from frame 0"), 1) << r.output;
  // Truncated.
  const std::string second = state_file(dir.file("farm.mkv"), 16);
  bytes = read_text(second);
  write_text(second, bytes.substr(0, bytes.size() / 3));
  r = run_chunk(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("is not usable (size"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "rebuilt the model state from frame 0"), 1) << r.output;
  ASSERT_EQ(wm({"assemble", dir.file("farm.yaml")}).exit_code, 0);
  expect_same_frames(dir.file("farm.mkv"), dir.file("plain.mkv"), 25);
}

// States are saved only while saving costs little against the chunks' work (every few chunks
// when they are large), so a chunk may find only an older state: it starts there and runs the
// chunks between again, unwritten. Here chunk 2 runs right after chunk 0 (chunk 1's state does
// not exist yet): it starts from chunk 0's state and runs frames 9-16 again.
TEST(CausalChunks, AnOlderStateIsContinuedOverTheChunksBetween) {
  TempDir dir("causal-older");
  make_input(dir.file("in.mp4"), 25);
  write_text(dir.file("plain.yaml"), job("wan", "in.mp4", "plain.mkv"));
  write_text(dir.file("farm.yaml"), job("wan", "in.mp4", "farm.mkv"));
  ASSERT_EQ(wmbatch({dir.file("plain.yaml")}).exit_code, 0);
  auto run_chunk = [&](int chunk) {
    return wm({"run", dir.file("farm.yaml"), "--chunk-frames", "8", "--chunk",
               std::to_string(chunk), "--progress", "none"});
  };
  ASSERT_EQ(run_chunk(0).exit_code, 0);
  ASSERT_TRUE(exists(state_file(dir.file("farm.mkv"), 8)));
  CommandResult r = run_chunk(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "started from the saved model state"), 1) << r.output;
  EXPECT_NE(r.output.find("(frames 9-16 run again to reach it)"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "rebuilt the model state"), 0) << r.output;
  r = run_chunk(1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(wm({"assemble", dir.file("farm.yaml")}).exit_code, 0);
  expect_same_frames(dir.file("farm.mkv"), dir.file("plain.mkv"), 25);
}

// SIGKILL once a chunk is done (seeded: after chunk 0 or 1, plus a random delay), then rerun.
TEST(CausalChunks, SigkillAfterAChunkResumesFromTheSavedState) {
  TempDir dir("causal-kill");
  make_input(dir.file("in.mp4"), 41);
  write_text(dir.file("ref.yaml"), job("wan", "in.mp4", "ref.mkv"));
  write_text(dir.file("job.yaml"), job("wan", "in.mp4", "out.mkv"));
  auto args = [&](const std::string& file) {
    return std::vector<std::string>{wmbatch_path(), "run", dir.file(file), "--chunk-frames", "8",
                                    "--progress",   "none"};
  };
  CommandResult ref = run_command(args("ref.yaml"));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  // 41 frames in chunks of 8: 0-8, 9-16, 17-24, 25-32, 33-40.
  expect_kill_and_resume(args("job.yaml"), dir.file("out.mkv"), dir.file("ref.mkv"), 2);
}

// The watch daemon SIGKILLed once a chunk of a reconstruct file is done, restarted: the file
// resumes from the saved state (no finished chunk started again, per the queue) and decodes to
// the whole-file run's frames.
TEST(CausalChunks, WatchKilledAfterAChunkResumesFromTheSavedState) {
  WatchSetup s("causal");
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: 8\nwatch:\n"
             "  - folder: in\n    job:\n      task: reconstruct\n      " +
                 causal_model_yaml("wan") +
                 "      encode: {codec: ffv1, pix_fmt: yuv444p}\n"
                 "    output: out/{stem}_rec.mkv\n");
  const std::string clip = s.dir().file("clip.mp4");
  make_input(clip, 41);
  write_text(s.dir().file("plain.yaml"), job("wan", clip, s.dir().file("plain.mkv")));
  ASSERT_EQ(wmbatch({s.dir().file("plain.yaml")}).exit_code, 0);

  expect_watch_kill_and_resume(s, clip, "a.mp4", "a_rec.mkv", s.dir().file("plain.mkv"), 41, 5);
}

}  // namespace
}  // namespace wm::test
