// The watch daemon running a SeedVR2 upscale (kind seedvr2: the tiny random-weight DiT and VAE of
// tests/data/golden) in farm chunks of whole temporal batches, end to end: the real `wmbatch
// watch` as a child process, a 16×16 clip with audio dropped into its folder, the queue read with
// SQLite. What is checked, exactly:
//  - uninterrupted: the file runs as several chunks, each starting at a batch seam, and the output
//    decodes to the frames and pts of a plain `wmbatch JOB.yaml` run of the same job (lossless
//    ffv1), with the same audio packets; the source is untouched;
//  - SIGKILL once the first chunk is done, restart: the finished chunk is found done and never
//    started again (the queue's chunk rows, the daemon's `already done` line), nothing is at the
//    output's final name in between, and the output is byte-identical to the uninterrupted one.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/integration/test_farm_helpers.h"
#include "tests/integration/test_watch_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-dit-tiny/";
const std::string kVae =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/weights.safetensors";

// 17 frames; batches of 5 overlapping by 2 (stride 3): [0, 5), [3, 8), ..., [12, 17). WATCH.yaml
// asks for chunks of 7 frames, rounded down to whole strides: 6 frames, chunks 0-5, 6-11, 12-16;
// each after the first also runs the batch before it (its context) and reads the overlap after it.
constexpr int kFrames = 17, kChunkFramesAsked = 7, kChunkFrames = 6, kChunks = 3;

// The job's keys (every line indented by `indent`): ×2 on the CPU in fp32, lossless output.
std::string job_keys(const std::string& indent) {
  return indent + "task: upscale\n" + indent + "precision: fp32\n" + indent + "devices: cpu\n" +
         indent + "encode: {codec: ffv1}\n" + indent + "model: {kind: seedvr2, dit: '" + kGolden +
         "weights.safetensors', vae: '" + kVae + "', heads: 2, norm_groups: 4, text_embedding: '" +
         kGolden +
         "upscale_t5.safetensors#text_pos', scale: 2, seed: 7, batch_frames: 5, batch_overlap: "
         "2}\n";
}

// A watched folder whose entry runs the job in chunks (kChunkFramesAsked) into out/{stem}_sr.mkv.
void write_watch(const WatchSetup& s) {
  write_text(s.watch_file(), "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: " +
                                 std::to_string(kChunkFramesAsked) +
                                 "\nwatch:\n  - folder: in\n    job:\n" + job_keys("      ") +
                                 "    output: out/{stem}_sr.mkv\n");
}

// The source clip: 16×16 ffv1 with FLAC audio.
void make_source(const std::string& path) {
  ClipSpec spec;
  spec.width = 16, spec.height = 16, spec.frames = kFrames;
  spec.codec = "ffv1";
  spec.pix_fmt = "yuv444p";
  spec.container_ext = ".mkv";
  spec.audio = true;
  spec.audio_codec = "flac";
  make_clip(path, spec);
}

// The plain run of the same job on `source`: `wmbatch JOB.yaml` (one process, no chunks).
std::string plain_run(const TempDir& dir, const std::string& source) {
  const std::string out = dir.file("plain.mkv");
  write_text(dir.file("plain.yaml"),
             "input: '" + source + "'\noutput: '" + out + "'\n" + job_keys(""));
  const CommandResult r = wmbatch({dir.file("plain.yaml")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// `got` decodes to `want`'s frames (pixels and pts) and carries its audio packets.
void expect_same_video_and_audio(const std::string& got, const std::string& want) {
  const auto a = read_all(got), b = read_all(want);
  ASSERT_EQ(a.size(), size_t(kFrames)) << got;
  ASSERT_EQ(b.size(), size_t(kFrames)) << want;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].pts, b[i].pts) << "frame " << i;
    EXPECT_TRUE(a[i].image.data == b[i].image.data) << got << ": frame " << i;
  }
  const auto audio = dump_packets(got, AVMEDIA_TYPE_AUDIO);
  ASSERT_FALSE(audio.empty()) << got << ": no audio";
  EXPECT_TRUE(audio == dump_packets(want, AVMEDIA_TYPE_AUDIO)) << got << ": audio differs";
}

// The file's chunk rows: kChunks, in order, each starting at a batch seam (a multiple of the
// stride 3), all done, none started again after it finished; returns the rows.
std::vector<ChunkRowT> expect_chunks_on_seams(const WatchSetup& s, int64_t item) {
  const auto rows = read_chunks(s.queue_file())[item];
  EXPECT_EQ(rows.size(), size_t(kChunks));
  int64_t next = 0;
  for (const ChunkRowT& c : rows) {
    const std::string what =
        "frames " + std::to_string(c.first_frame) + "-" + std::to_string(c.last_frame);
    EXPECT_EQ(c.first_frame, next) << what;
    EXPECT_EQ(c.first_frame % 3, 0) << what << ": not at a batch seam";
    EXPECT_EQ(c.frames, std::min<int64_t>(kChunkFrames, kFrames - c.first_frame)) << what;
    EXPECT_TRUE(c.done) << what;
    EXPECT_EQ(c.starts, c.starts_at_done) << what << ": started again after it finished";
    next = c.last_frame + 1;
  }
  EXPECT_EQ(next, kFrames);
  return rows;
}

// One file through the daemon, uninterrupted (`ref`): several chunks on seams; the plain run's
// frames, pts and audio; 32×32; the source as it was. Then again (`s`), SIGKILLed once the first
// chunk is done (the queue records it) and restarted: the file resumes after that chunk, nothing
// is at the final name before it is done, and the output is byte for byte the uninterrupted one.
TEST(WatchSeedVR2, ChunkedUpscaleEqualsThePlainRunAndResumesAfterSigkill) {
  WatchSetup ref("seedvr2-ref"), s("seedvr2-kill");
  write_watch(ref);
  write_watch(s);
  const std::string clip = s.dir().file("clip.mkv");
  make_source(clip);
  const std::string plain = plain_run(s.dir(), clip);

  // Uninterrupted.
  {
    SCOPED_TRACE("uninterrupted");
    ref.start();
    stdfs::copy_file(clip, ref.in("a.mkv"));
    ASSERT_TRUE(ref.wait_finished(1)) << ref.log();
    EXPECT_EQ(ref.stop(), 0) << ref.log();
    const auto rows = ref.queue();
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_EQ(rows[0].state, "done") << rows[0].last_error;
    EXPECT_EQ(rows[0].attempts, 1);
    for (const ChunkRowT& c : expect_chunks_on_seams(ref, rows[0].id)) EXPECT_EQ(c.starts, 1);
    // The line the killed run's restart must not have.
    EXPECT_EQ(count_of(ref.log(), "frames 0-5): done,"), 1) << ref.log();
    const std::string out = ref.out("a_sr.mkv");
    const Probe p = probe(out);
    EXPECT_EQ(p.width, 32);
    EXPECT_EQ(p.height, 32);
    EXPECT_EQ(p.video_frames, kFrames);
    EXPECT_TRUE(p.has_audio);
    EXPECT_NEAR(p.audio_duration, probe(clip).audio_duration, 0.05);
    expect_same_video_and_audio(out, plain);
    EXPECT_TRUE(same_bytes(ref.in("a.mkv"), clip)) << "the source was modified";
    for (const std::string& name : list_dir(ref.dir().file("out"))) {
      EXPECT_NE(name[0], '.') << name << ": a staging file or work folder left behind";
    }
  }

  // Killed once the first chunk is done, restarted.
  SCOPED_TRACE("killed");
  const std::string out = s.out("a_sr.mkv");
  Background& daemon = s.start();
  stdfs::copy_file(clip, s.in("a.mkv"));
  bool early_output = false;  // anything at the final name before the file is done
  ASSERT_TRUE(s.wait_chunk_done([&] { early_output = early_output || exists(out); })) << s.log();
  daemon.signal(SIGKILL);
  EXPECT_EQ(daemon.wait(), 128 + SIGKILL);
  EXPECT_FALSE(early_output) << out << ": appeared before the file was done";
  ASSERT_FALSE(exists(out)) << "the file finished before the kill: make the clip longer";
  {
    const auto chunks = read_chunks(s.queue_file());
    ASSERT_EQ(chunks.size(), 1u);
    const auto& rows = chunks.begin()->second;
    ASSERT_FALSE(rows.empty());
    EXPECT_TRUE(rows.front().done) << "the first chunk finishes first";
    int done = 0;
    for (const ChunkRowT& c : rows) done += c.done;
    EXPECT_LT(done, kChunks) << "the file finished before the kill";
  }
  EXPECT_TRUE(same_bytes(s.in("a.mkv"), clip)) << "the source was modified";

  s.start();
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].interrupted, 1);
  EXPECT_EQ(rows[0].attempts, 2);
  const auto chunks = expect_chunks_on_seams(s, rows[0].id);
  EXPECT_EQ(chunks.front().starts, 1) << "the first chunk finished before the kill";
  // The restart found it done (its segment intact) and did not run it.
  EXPECT_NE(s.log().find("frames 0-5): already done (6 frames)"), std::string::npos) << s.log();
  EXPECT_EQ(count_of(s.log(), "frames 0-5): done,"), 0) << s.log();

  EXPECT_TRUE(same_bytes(out, ref.out("a_sr.mkv")));
  EXPECT_TRUE(same_bytes(s.in("a.mkv"), clip)) << "the source was modified";
  for (const std::string& name : list_dir(s.dir().file("out"))) {
    EXPECT_NE(name[0], '.') << name << ": a staging file or work folder left behind";
  }
}

}  // namespace
}  // namespace wm::test
