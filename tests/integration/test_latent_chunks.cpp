// decode_latents (a latent file → video, the causal VAEs Wan2.1 and SeedVR2) in farm chunks
// (docs/farm.md, "Causal models"), with the tiny golden weights of tests/data; the latents are
// made by the test (encode_latents of a clip it makes). Chunks are output frames on latent slice
// boundaries. What is checked:
//  - the single-process chunked run (one session kept from chunk to chunk) and chunks run as
//    separate processes (each resumed from the state file the chunk before saved) decode to the
//    whole-file run's frames and pts (lossless ffv1), and the two chunked outputs are
//    byte-identical;
//  - SIGKILL after a chunk finished, rerun: byte-identical to the uninterrupted chunked run, the
//    finished chunks not redone, the first chunk the rerun works on started from the saved state.
#include <gtest/gtest.h>

#include "tests/integration/test_causal_helpers.h"
#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

// Latents of a 41-frame clip (Wan2.1 and SeedVR2 tiny: 11 latent frames) at dir/lat.safetensors.
void make_latents(TempDir& dir, const std::string& kind) {
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 41;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(
      dir.file("enc.yaml"),
      "task: encode_latents\ninput: in.mp4\noutput: lat.safetensors\n" + causal_model_yaml(kind));
  CommandResult r = wmbatch({dir.file("enc.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// Slices of 2 latents: with --chunk-frames 8, chunks of one slice (0-4, 5-12, ..., 37-40).
std::string job(const std::string& kind, const std::string& output) {
  return "task: decode_latents\ninput: lat.safetensors\noutput: " + output + "\n" +
         causal_model_yaml(kind) + "slice_frames: 2\nencode: {codec: ffv1, pix_fmt: yuv444p}\n";
}

class LatentChunks : public ::testing::TestWithParam<std::string> {};

TEST_P(LatentChunks, ChunksEqualTheWholeRun) {
  const std::string kind = GetParam();
  TempDir dir("latent-chunks");
  make_latents(dir, kind);
  write_text(dir.file("plain.yaml"), job(kind, "plain.mkv"));
  write_text(dir.file("chunked.yaml"), job(kind, "chunked.mkv"));
  write_text(dir.file("split.yaml"), job(kind, "split.mkv"));
  CommandResult plain = wmbatch({dir.file("plain.yaml")});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  CommandResult plan = wm({"plan", dir.file("chunked.yaml"), "--chunk-frames", "8"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const int chunks = count(plan.output, "\"whole_input\": false");
  EXPECT_EQ(chunks, 6) << plan.output;
  for (const char* range : {"\"first_frame\": 5", "\"last_frame\": 4", "\"last_frame\": 12",
                            "\"first_frame\": 37", "\"last_frame\": 40"}) {
    EXPECT_NE(plan.output.find(range), std::string::npos) << range << "\n" << plan.output;
  }

  CommandResult chunked =
      wm({"run", dir.file("chunked.yaml"), "--chunk-frames", "8", "--progress", "none"});
  ASSERT_EQ(chunked.exit_code, 0) << chunked.output;
  EXPECT_EQ(count(chunked.output, "continued the model state in memory"), chunks - 1)
      << chunked.output;
  EXPECT_EQ(count(chunked.output, "rebuilt the model state"), 0) << chunked.output;
  expect_same_frames(dir.file("chunked.mkv"), dir.file("plain.mkv"), 41);

  for (int chunk = 0; chunk < chunks; ++chunk) {
    CommandResult r = wm({"run", dir.file("split.yaml"), "--chunk-frames", "8", "--chunk",
                          std::to_string(chunk), "--progress", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (chunk > 0) {
      EXPECT_EQ(count(r.output, "started from the saved model state"), 1) << r.output;
    }
  }
  CommandResult assemble = wm({"assemble", dir.file("split.yaml")});
  ASSERT_EQ(assemble.exit_code, 0) << assemble.output;
  EXPECT_TRUE(same_bytes(dir.file("split.mkv"), dir.file("chunked.mkv")));
  expect_same_frames(dir.file("split.mkv"), dir.file("plain.mkv"), 41);
}

INSTANTIATE_TEST_SUITE_P(Models, LatentChunks, ::testing::Values("wan", "seedvr2"));

// SIGKILL once a chunk is done (seeded: after chunk 0, 1 or 2, plus a random delay), then rerun.
TEST(LatentChunks, SigkillAfterAChunkResumesFromTheSavedState) {
  TempDir dir("latent-kill");
  make_latents(dir, "wan");
  write_text(dir.file("ref.yaml"), job("wan", "ref.mkv"));
  write_text(dir.file("job.yaml"), job("wan", "out.mkv"));
  auto args = [&](const std::string& file) {
    return std::vector<std::string>{wmbatch_path(), "run", dir.file(file), "--chunk-frames", "8",
                                    "--progress",   "none"};
  };
  CommandResult ref = run_command(args("ref.yaml"));
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  // 41 frames in chunks 0-4, 5-12, 13-20, 21-28, 29-36, 37-40: killed after one of the first 3.
  expect_kill_and_resume(args("job.yaml"), dir.file("out.mkv"), dir.file("ref.mkv"), 3);
}

// The watch daemon SIGKILLed once a chunk of a latent file is done, restarted: the file resumes
// from the saved state and decodes to the whole-file run's frames.
TEST(LatentChunks, WatchKilledAfterAChunkResumesFromTheSavedState) {
  WatchSetup s("latent");
  TempDir dir("latent-watch");
  make_latents(dir, "wan");
  write_text(dir.file("plain.yaml"), job("wan", "plain.mkv"));
  ASSERT_EQ(wmbatch({dir.file("plain.yaml")}).exit_code, 0);
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: 8\nwatch:\n"
             "  - folder: in\n    job:\n      task: decode_latents\n      " +
                 causal_model_yaml("wan") +
                 "      slice_frames: 2\n"
                 "      encode: {codec: ffv1, pix_fmt: yuv444p}\n"
                 "    output: out/{stem}.mkv\n");
  expect_watch_kill_and_resume(s, dir.file("lat.safetensors"), "a.safetensors", "a.mkv",
                               dir.file("plain.mkv"), 41, 6);
}

}  // namespace
}  // namespace wm::test
