// Helpers shared by the causal farm-chunk tests (test_causal_chunks.cpp: reconstruct,
// test_latent_chunks.cpp: decode_latents): the tiny causal VAEs of tests/data, exact frame
// comparison, and the SIGKILL-after-a-chunk-and-rerun round.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "src/weights/safetensors.h"
#include "tests/integration/test_farm_helpers.h"
#include "tests/integration/test_watch_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {

// The `model:` line of a job for the tiny golden Wan2.1 ("wan") or SeedVR2 ("seedvr2") VAE.
inline std::string causal_model_yaml(const std::string& kind) {
  if (kind == "wan") {
    return "model: {kind: wan2.1-vae, weights: '" + golden_file("weights.safetensors") +
           "', dim: 16}\n";
  }
  return "model: {kind: seedvr2-vae, weights: '" + std::string(WM_SOURCE_DIR) +
         "/tests/data/golden/seedvr2-tiny/weights.safetensors', norm_groups: 4}\n";
}

// `got` and `want` decode to `frames` frames with the same pts and pixels.
inline void expect_same_frames(const std::string& got, const std::string& want, size_t frames) {
  const auto a = read_all(got);
  const auto b = read_all(want);
  ASSERT_EQ(a.size(), frames) << got;
  ASSERT_EQ(b.size(), frames) << want;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pts, b[i].pts) << "frame " << i;
    EXPECT_TRUE(a[i].image.data == b[i].image.data) << got << " frame " << i;
  }
}

// Latent files `got` and `want` (encode_latents) hold the same tensors, byte for byte, and the
// same metadata but "source" (the path of the input each run read).
inline void expect_same_latents(const std::string& got, const std::string& want) {
  io::SafetensorsFile a(got), b(want);
  ASSERT_EQ(a.names(), b.names()) << got;
  for (const std::string& name : a.names()) {
    const io::TensorInfo &x = a.info(name), &y = b.info(name);
    EXPECT_EQ(x.dtype, y.dtype) << name;
    EXPECT_EQ(x.shape, y.shape) << name;
    ASSERT_EQ(x.bytes, y.bytes) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.bytes), 0) << got << ": tensor " << name;
  }
  auto meta_a = a.metadata(), meta_b = b.metadata();
  EXPECT_EQ(meta_a.erase("source"), 1u);
  EXPECT_EQ(meta_b.erase("source"), 1u);
  EXPECT_EQ(meta_a, meta_b) << got;
  EXPECT_FALSE(meta_a.empty());
}

// Three seeded rounds: `args` (a `wmbatch run ... --chunk-frames N` writing `output`) runs in the
// background and is SIGKILLed once chunk 0..kill_chunks-1 is done (plus a random delay), then
// run again: the chunks done before the kill are not redone, the rerun starts from the saved
// state (never from the prefix), and the output is byte-identical to `reference`. At least two
// rounds must land while chunks remain.
inline void expect_kill_and_resume(const std::vector<std::string>& args, const std::string& output,
                                   const std::string& reference, int kill_chunks) {
  namespace stdfs = std::filesystem;
  std::mt19937 rng(20261124);
  std::uniform_real_distribution<double> jitter(0.0, 0.05);
  int resumed = 0;
  for (int round = 0; round < 3; ++round) {
    stdfs::remove_all(output + ".wmfarm");
    stdfs::remove(output);
    const int after = int(rng() % unsigned(kill_chunks));  // kill once chunk `after` is done
    Background run(args, output + ".kill-" + std::to_string(round) + ".log");
    const std::string mark = "chunk " + std::to_string(after) + " (";
    const bool seen = wait_until(
        [&] {
          const std::string log = run.output();
          const size_t at = log.find(mark);
          return run.exited() ||
                 (at != std::string::npos && log.find(": done,", at) != std::string::npos);
        },
        120);
    ASSERT_TRUE(seen);
    std::this_thread::sleep_for(std::chrono::duration<double>(jitter(rng)));
    if (run.exited()) continue;  // finished first: nothing to resume
    run.signal(SIGKILL);
    run.wait();
    EXPECT_FALSE(exists(output));
    CommandResult again = run_command(args);
    ASSERT_EQ(again.exit_code, 0) << again.output;
    for (int c = 0; c <= after; ++c) {  // chunks done before the kill are not redone
      const size_t at =
          again.output.find("chunk " + std::to_string(c) + " (" + output + ", frames");
      ASSERT_NE(at, std::string::npos) << again.output;
      EXPECT_NE(again.output.find("already done", at), std::string::npos) << again.output;
    }
    EXPECT_EQ(count(again.output, "started from the saved model state"), 1) << again.output;
    EXPECT_EQ(count(again.output, "rebuilt the model state"), 0) << again.output;
    EXPECT_TRUE(same_bytes(output, reference));
    ++resumed;
  }
  EXPECT_GE(resumed, 2) << "the kills must land while chunks remain";
}

// The watch daemon of `s` (its WATCH.yaml written, with chunk_frames) SIGKILLed once a chunk of
// `source` (copied into the watched folder `in` as `name`) is done, restarted: the file resumes
// from the saved state (no finished chunk started again, per the queue: `chunks` rows) and
// `output` decodes to `reference`'s `frames` frames (a .safetensors `reference`:
// expect_same_latents).
inline void expect_watch_kill_and_resume(WatchSetup& s, const std::string& source,
                                         const std::string& name, const std::string& output,
                                         const std::string& reference, size_t frames,
                                         size_t chunks) {
  Background& daemon = s.start();
  std::filesystem::copy_file(source, s.in(name));
  ASSERT_TRUE(s.wait_chunk_done()) << s.log();
  daemon.signal(SIGKILL);
  daemon.wait();
  ASSERT_FALSE(exists(s.out(output))) << "the file finished before the kill";

  s.start();
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(count(s.log(), "started from the saved model state"), 1) << s.log();
  EXPECT_EQ(count(s.log(), "rebuilt the model state"), 0) << s.log();
  const auto done = read_chunks(s.queue_file())[rows[0].id];
  ASSERT_EQ(done.size(), chunks);
  EXPECT_EQ(done.front().starts, 1) << "the first chunk finished before the kill";
  for (const ChunkRowT& c : done) {
    EXPECT_TRUE(c.done) << c.first_frame;
    EXPECT_EQ(c.starts, c.starts_at_done) << c.first_frame << ": started again after it finished";
  }
  if (reference.size() > 12 && reference.compare(reference.size() - 12, 12, ".safetensors") == 0) {
    expect_same_latents(s.out(output), reference);  // encode_latents
  } else {
    expect_same_frames(s.out(output), reference, frames);
  }
}

}  // namespace wm::test
