// encode_latents (a video → a latent .safetensors, the causal VAEs Wan2.1 and SeedVR2) in farm
// chunks (docs/farm.md, "Causal models"), with the tiny golden weights of tests/data and a clip
// the test makes. Each chunk writes its latents to a segment; assembly concatenates them. What
// is checked:
//  - the single-process chunked run (one session kept from chunk to chunk) and chunks run as
//    separate processes (each resumed from the state file the chunk before saved) assemble to
//    the whole run's file byte for byte (tensors and metadata; SeedVR2 with its logvar tensor),
//    also when a chunk's saved state is lost (it reruns the model over the frames before it and
//    drops those latents);
//  - SIGKILL after a chunk finished (`wmbatch run`, and the watch daemon), rerun: byte-identical
//    to the whole run, the finished chunks not redone, the first chunk the rerun works on started
//    from the saved state.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/integration/test_causal_helpers.h"
#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

void make_input(TempDir& dir) {
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 41;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
}

// Slices of 1 + 8 frames, then 8: with --chunk-frames 8, chunks of one slice (0-8, 9-16, ...,
// 33-40). SeedVR2 writes its logvar too (a second tensor to concatenate).
std::string job(const std::string& kind, const std::string& output) {
  std::string model = causal_model_yaml(kind);
  if (kind == "seedvr2") model.insert(model.rfind('}'), ", logvar: true");
  return "task: encode_latents\ninput: in.mp4\noutput: " + output + "\n" + model +
         "slice_frames: 8\n";
}

class EncodeChunks : public ::testing::TestWithParam<std::string> {};

TEST_P(EncodeChunks, ChunksEqualTheWholeRunByteForByte) {
  const std::string kind = GetParam();
  TempDir dir("encode-chunks");
  make_input(dir);
  write_text(dir.file("plain.yaml"), job(kind, "plain.safetensors"));
  write_text(dir.file("chunked.yaml"), job(kind, "chunked.safetensors"));
  write_text(dir.file("split.yaml"), job(kind, "split.safetensors"));
  CommandResult plain = wmbatch({dir.file("plain.yaml")});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  CommandResult plan = wm({"plan", dir.file("chunked.yaml"), "--chunk-frames", "8"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const int chunks = count(plan.output, "\"whole_input\": false");
  EXPECT_EQ(chunks, 5) << plan.output;
  for (const char* range :
       {"\"last_frame\": 8", "\"first_frame\": 9", "\"first_frame\": 33", "\"last_frame\": 40"}) {
    EXPECT_NE(plan.output.find(range), std::string::npos) << range << "\n" << plan.output;
  }

  CommandResult chunked =
      wm({"run", dir.file("chunked.yaml"), "--chunk-frames", "8", "--progress", "none"});
  ASSERT_EQ(chunked.exit_code, 0) << chunked.output;
  EXPECT_EQ(count(chunked.output, "continued the model state in memory"), chunks - 1)
      << chunked.output;
  EXPECT_EQ(count(chunked.output, "rebuilt the model state"), 0) << chunked.output;
  EXPECT_TRUE(same_bytes(dir.file("chunked.safetensors"), dir.file("plain.safetensors")));

  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (chunk == 2) {
      // Chunk 1's state lost: chunk 2 runs the model over frames 0-16 again (unwritten).
      for (const auto& e :
           std::filesystem::directory_iterator(dir.file("split.safetensors.wmfarm"))) {
        if (e.path().filename().string().rfind("state-", 0) == 0) std::filesystem::remove(e.path());
      }
    }
    CommandResult r = wm({"run", dir.file("split.yaml"), "--chunk-frames", "8", "--chunk",
                          std::to_string(chunk), "--progress", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (chunk == 2) {
      EXPECT_EQ(count(r.output, "rebuilt the model state from frame 0"), 1) << r.output;
    } else if (chunk > 0) {
      EXPECT_EQ(count(r.output, "started from the saved model state"), 1) << r.output;
    }
  }
  EXPECT_FALSE(exists(dir.file("split.safetensors")));
  CommandResult assemble = wm({"assemble", dir.file("split.yaml")});
  ASSERT_EQ(assemble.exit_code, 0) << assemble.output;
  EXPECT_TRUE(same_bytes(dir.file("split.safetensors"), dir.file("plain.safetensors")));
}

INSTANTIATE_TEST_SUITE_P(Models, EncodeChunks, ::testing::Values("wan", "seedvr2"));

// SIGKILL once a chunk is done (seeded: after chunk 0, 1 or 2, plus a random delay), then rerun:
// the same bytes as the whole run.
TEST(EncodeChunks, SigkillAfterAChunkResumesFromTheSavedState) {
  TempDir dir("encode-kill");
  make_input(dir);
  write_text(dir.file("plain.yaml"), job("wan", "plain.safetensors"));
  write_text(dir.file("job.yaml"), job("wan", "out.safetensors"));
  CommandResult plain = wmbatch({dir.file("plain.yaml")});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const std::vector<std::string> args{
      wmbatch_path(), "run", dir.file("job.yaml"), "--chunk-frames", "8", "--progress", "none"};
  expect_kill_and_resume(args, dir.file("out.safetensors"), dir.file("plain.safetensors"), 3);
}

// The watch daemon SIGKILLed once a chunk of a video is done, restarted: the file resumes from
// the saved state (no finished chunk started again) and its latents are the whole run's bytes
// (tensors and metadata; "source" names the watched copy).
TEST(EncodeChunks, WatchKilledAfterAChunkResumesFromTheSavedState) {
  WatchSetup s("encode");
  TempDir dir("encode-watch");
  make_input(dir);
  write_text(dir.file("plain.yaml"), job("wan", "plain.safetensors"));
  ASSERT_EQ(wmbatch({dir.file("plain.yaml")}).exit_code, 0);
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: 8\nwatch:\n"
             "  - folder: in\n    job:\n      task: encode_latents\n      " +
                 causal_model_yaml("wan") +
                 "      slice_frames: 8\n"
                 "    output: out/{stem}.safetensors\n");
  expect_watch_kill_and_resume(s, dir.file("in.mp4"), "a.mp4", "a.safetensors",
                               dir.file("plain.safetensors"), 41, 5);
}

}  // namespace
}  // namespace wm::test
