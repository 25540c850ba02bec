// Farm mode end to end (docs/farm.md): plan, run --chunk/--frames, assemble with the real
// wmbatch binary. What is checked, exactly:
//  - chunks run as separate processes in any order, then assembled, are byte-identical to the
//    single-process run of the same chunks (`wmbatch run JOB`), and have the plain run's frame
//    count, pts and audio/subtitle packets; with a lossless codec they decode to the plain
//    run's pixels;
//  - SIGKILL at random points, then rerun: byte-identical output, never a partial file at a final
//    path; SIGTERM: exit 75 at the next slice boundary, rerun completes; the same chunk twice at
//    once: one does the work; a finished chunk reruns without writing its segment again; changed
//    inputs redo.
//
// libx264 note: Debian 12's libx264 (r3095) reads uninitialised memory at presets veryfast and
// slower for frames this small (< ~640x360), so its bits vary from run to run whatever wmbatch
// does; these tests encode with `superfast` (B-frames, deterministic).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "scheduler/journal.h"
#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string job_text(const std::string& input, const std::string& output,
                     const std::string& encode = "{preset: superfast}",
                     const std::string& extra = "") {
  return "input: " + input + "\noutput: " + output +
         "\nmodel: {kind: lanczos, scale: 2}\nencode: " + encode + "\n" + extra;
}

// Files under `dir`, recursively, whose name contains `part`.
std::vector<std::string> find_files(const std::string& dir, const std::string& part) {
  std::vector<std::string> out;
  if (!stdfs::exists(dir)) return out;
  for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path());
  }
  return out;
}

std::vector<std::string> segments_of(const std::string& output) {
  std::vector<std::string> out;
  const std::string dir = output + ".wmfarm";
  if (!stdfs::exists(dir)) return out;
  for (const auto& e : stdfs::directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.rfind("seg-", 0) == 0 && name.find(".partial") == std::string::npos) {
      out.push_back(e.path());
    }
  }
  return out;
}

// The last "Progress: N%" line of a log (-1 when none).
int last_percent(const std::string& log) {
  const size_t at = log.rfind("Progress: ");
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + 10);
}

// A 40-frame NTSC-rate clip (30000/1001: pts that 1/1000 s cannot hold) with audio and
// subtitles; chunks of 12 → 4 chunks (12, 12, 12, 4), encoded with B-frames. mp4 (dts stored,
// edit lists) and mkv (no dts stored, ms timestamps).
class FarmContainers : public ::testing::TestWithParam<std::string> {};

TEST_P(FarmContainers, ChunksAssembledEqualTheSingleRun) {
  const std::string ext = GetParam();
  TempDir dir("farm-eq");
  ClipSpec spec;
  spec.width = 96;
  spec.height = 64;
  spec.frames = 40;
  spec.fps = {30000, 1001};
  spec.subtitles = true;
  spec.gop = 7;  // source keyframes that do not line up with the chunks
  spec.container_ext = ext;
  spec.color_primaries = spec.color_trc = spec.colorspace = 1;  // BT.709, tagged
  spec.color_range = 1;
  spec.rotation_90 = true;
  spec.hdr_side_data = true;
  const std::string in = "in" + ext, out = "/out" + ext;
  make_clip(dir.file(in), spec);
  write_text(dir.file("farm.yaml"), job_text(in, "farm" + out));
  write_text(dir.file("single.yaml"), job_text(in, "single" + out));
  write_text(dir.file("plain.yaml"), job_text(in, "plain" + out));

  CommandResult plan = wm({"plan", dir.file("farm.yaml"), "--chunk-frames", "12"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto json = nlohmann::json::parse(plan.output.substr(plan.output.find('{')));
  const auto& chunks = json["chunks"];
  ASSERT_EQ(chunks.size(), 4u) << plan.output;
  EXPECT_EQ(chunks[1]["first_frame"], 12);
  EXPECT_EQ(chunks[1]["last_frame"], 23);
  EXPECT_EQ(chunks[1]["context_before"], 0);
  EXPECT_EQ(chunks[3]["last_frame"], 39);
  EXPECT_EQ(chunks[0]["input_frames"], 40);
  EXPECT_FALSE(exists(dir.file("farm"))) << "plan writes nothing";

  // Chunks out of order, each its own process, as farm tasks would.
  for (int c : {2, 0, 3, 1}) {
    CommandResult r = wm({"run", dir.file("farm.yaml"), "--chunk", std::to_string(c),
                          "--chunk-frames", "12", "--progress", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(exists(dir.file("farm" + out))) << "only assemble writes the output";
  }
  EXPECT_EQ(segments_of(dir.file("farm" + out)).size(), 4u);
  CommandResult a = wm({"assemble", dir.file("farm.yaml")});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(segments_of(dir.file("farm" + out)).empty()) << "segments removed after assembly";
  EXPECT_TRUE(find_files(dir.path(), ".partial").empty());

  CommandResult s =
      wm({"run", dir.file("single.yaml"), "--chunk-frames", "12", "--progress", "none"});
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_TRUE(same_bytes(dir.file("farm" + out), dir.file("single" + out)))
      << "chunked + assembled must be byte-identical to the single-process run";

  ASSERT_EQ(wm({"--progress", "none", dir.file("plain.yaml")}).exit_code, 0);
  const Probe farm = probe(dir.file("farm" + out));
  const Probe plain = probe(dir.file("plain" + out));
  EXPECT_EQ(farm.video_frames, 40);
  EXPECT_EQ(farm.width, 192);
  EXPECT_EQ(farm.video_pts, plain.video_pts);
  EXPECT_EQ(farm.video_time_base.num, plain.video_time_base.num);
  EXPECT_EQ(farm.video_time_base.den, plain.video_time_base.den);
  EXPECT_EQ(farm.subtitle_streams, plain.subtitle_streams);
  EXPECT_EQ(farm.subtitle_packets, plain.subtitle_packets);
  EXPECT_EQ(farm.audio_language, "eng");
  // Colour tags, rotation and HDR side data as the plain run carries them.
  EXPECT_EQ(farm.color_primaries, plain.color_primaries);
  EXPECT_EQ(farm.color_trc, plain.color_trc);
  EXPECT_EQ(farm.colorspace, plain.colorspace);
  EXPECT_EQ(farm.color_range, plain.color_range);
  EXPECT_EQ(farm.color_primaries, 1);
  EXPECT_EQ(farm.rotation, plain.rotation);
  EXPECT_EQ(farm.has_mastering_display, plain.has_mastering_display);
  EXPECT_EQ(farm.has_content_light, plain.has_content_light);
  if (ext == ".mp4") {
    EXPECT_NE(farm.rotation, 0);
    EXPECT_TRUE(farm.has_mastering_display);
  }
  EXPECT_GT(farm.subtitle_packets, 0);
  const auto farm_audio = dump_packets(dir.file("farm" + out), AVMEDIA_TYPE_AUDIO);
  const auto plain_audio = dump_packets(dir.file("plain" + out), AVMEDIA_TYPE_AUDIO);
  ASSERT_FALSE(farm_audio.empty());
  EXPECT_TRUE(farm_audio == plain_audio) << "audio packets copied once, unchanged";
  // The video is stream-copied: the segments' packets, each chunk starting with a keyframe.
  const auto video = dump_packets(dir.file("farm" + out), AVMEDIA_TYPE_VIDEO);
  ASSERT_EQ(video.size(), 40u);
  for (size_t i = 0; i < video.size(); ++i) {
    if (i % 12 == 0) {
      EXPECT_TRUE(video[i].key) << "chunk starting at packet " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Containers, FarmContainers, ::testing::Values(".mp4", ".mkv"),
                         [](const auto& info) { return info.param.substr(1); });

// A lossless codec, VFR input, mkv: the assembled file decodes to the plain run's frames and pts.
TEST(Farm, LosslessChunksDecodeToThePlainRunsPixels) {
  TempDir dir("farm-ffv1");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 30;
  spec.vfr = true;
  spec.container_ext = ".mkv";
  make_clip(dir.file("in.mkv"), spec);
  const std::string encode = "{codec: ffv1, pix_fmt: yuv444p}";
  write_text(dir.file("farm.yaml"), job_text("in.mkv", "farm.mkv", encode));
  write_text(dir.file("plain.yaml"), job_text("in.mkv", "plain.mkv", encode));
  // Explicit ranges, as a farm manager would hand them out.
  for (const char* range : {"20-29", "0-9", "10-19"}) {
    CommandResult r = wm({"run", dir.file("farm.yaml"), "--frames", range, "--progress", "none"});
    ASSERT_EQ(r.exit_code, 0) << range << ": " << r.output;
  }
  ASSERT_EQ(wm({"assemble", dir.file("farm.yaml")}).exit_code, 0);
  ASSERT_EQ(wm({"--progress", "none", dir.file("plain.yaml")}).exit_code, 0);
  const auto farm = read_all(dir.file("farm.mkv"));
  const auto plain = read_all(dir.file("plain.mkv"));
  ASSERT_EQ(farm.size(), 30u);
  ASSERT_EQ(farm.size(), plain.size());
  for (size_t i = 0; i < farm.size(); ++i) {
    EXPECT_EQ(farm[i].pts, plain[i].pts) << "frame " << i;
    EXPECT_TRUE(farm[i].image.data == plain[i].image.data) << "frame " << i;
  }
  EXPECT_TRUE(dump_packets(dir.file("farm.mkv"), AVMEDIA_TYPE_AUDIO) ==
              dump_packets(dir.file("plain.mkv"), AVMEDIA_TYPE_AUDIO));
}

// The kill test's clip: 100 frames of 320x240 → 640x480, two chunks of 50 (about a second of
// work each on two cores).
struct KillSetup {
  TempDir dir{"farm-kill"};
  KillSetup() {
    // A chunk must run long enough for the kills to land in it (about a second on 2 cores):
    // since wmbatch no longer loads LibTorch for a resampler job, a 320x240 chunk was done in a
    // few tenths of a second, before most kills. (superfast: no lookahead or mb-tree, so a
    // resumed chunk encodes the same bytes.)
    ClipSpec spec;
    spec.width = 800;
    spec.height = 448;
    spec.frames = 100;
    spec.gop = 30;
    make_clip(dir.file("in.mp4"), spec);
    const std::string extra = "slice_frames: 5\n";
    write_text(dir.file("job.yaml"),
               job_text("in.mp4", "out/x2.mp4", "{preset: superfast}", extra));
    write_text(dir.file("ref.yaml"),
               job_text("in.mp4", "ref/x2.mp4", "{preset: superfast}", extra));
  }
  std::vector<std::string> run_args(int chunk) const {
    std::vector<std::string> a = {
        wmbatch_path(), "run", dir.file("job.yaml"), "--chunk-frames", "50", "--progress", "none"};
    if (chunk >= 0) {
      a.push_back("--chunk");
      a.push_back(std::to_string(chunk));
    }
    return a;
  }
};

// After any kill: nothing at the final output path, and every segment at its final name whole.
void expect_no_torn_files(const std::string& dir) {
  EXPECT_FALSE(exists(dir + "/out/x2.mp4")) << "nothing assembles unless asked";
  for (const std::string& seg : segments_of(dir + "/out/x2.mp4")) {
    Probe p;
    ASSERT_NO_THROW(p = probe(seg)) << seg;
    EXPECT_EQ(p.video_frames, 50) << seg;
  }
  if (!exists(dir + "/out")) return;
  for (const std::string& name : list_dir(dir + "/out")) {
    EXPECT_EQ(name.find(".partial"), std::string::npos) << name << " next to the output";
  }
}

TEST(Farm, SigkillAtRandomPointsThenRerunGivesTheSameFile) {
  KillSetup s;
  CommandResult ref = run_command({wmbatch_path(), "run", s.dir.file("ref.yaml"), "--chunk-frames",
                                   "50", "--progress", "none"});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  // Kill points, seeded: a quarter at a random time in start-up (loading, probing, opening the
  // journal); the rest once the chunk has reached a random progress (0-90%, one line per 5-frame
  // slice) plus a random delay, i.e. while the segment is being encoded. Progress-triggered, so
  // they land mid-run however fast or loaded the machine is.
  std::mt19937 rng(20261122);
  std::uniform_real_distribution<double> startup(0.05, 0.6), jitter(0.0, 0.04), whole(0.5, 3.0);
  int kills = 0, mid_write = 0;
  for (int i = 0; i < 12; ++i) {
    const int chunk = int(rng() % 2);
    const bool early = rng() % 4 == 0;
    const int percent = int(rng() % 10) * 10;
    const auto launched = stdfs::file_time_type::clock::now();
    std::vector<std::string> args = s.run_args(chunk);
    args[6] = "farm";  // --progress farm
    Background run(args, s.dir.file("kill.log"));
    if (early) {
      std::this_thread::sleep_for(std::chrono::duration<double>(startup(rng)));
    } else {
      const std::string mark = "Progress: " + std::to_string(percent) + "%";
      wait_until([&] { return run.exited() || run.output().find(mark) != std::string::npos; }, 60);
      std::this_thread::sleep_for(std::chrono::duration<double>(jitter(rng)));
    }
    if (!run.exited()) {
      run.signal(SIGKILL);
      ++kills;
    }
    const int rc = run.wait();
    // Killed while a segment was being written (its .partial, written since the start, is
    // left in the farm folder).
    for (const std::string& partial : find_files(s.dir.file("out"), ".partial")) {
      if (stdfs::last_write_time(partial) >= launched) {
        ++mid_write;
        break;
      }
    }
    EXPECT_TRUE(rc == 0 || rc == 128 + SIGKILL) << rc << ": " << run.output();
    expect_no_torn_files(s.dir.path());
  }
  EXPECT_GE(kills, 10) << "the kills must land while the chunks run";
  EXPECT_GE(mid_write, 5) << "most kills must land while a segment is being written";
  std::printf("%d kills, %d while writing a segment\n", kills, mid_write);
  // Rerun until done; every chunk resumes from the journal.
  for (int chunk : {0, 1}) {
    CommandResult r = run_command(s.run_args(chunk));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  CommandResult a = wm({"assemble", s.dir.file("job.yaml")});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(same_bytes(s.dir.file("out/x2.mp4"), s.dir.file("ref/x2.mp4")))
      << "killed and resumed must be byte-identical to an uninterrupted run";
  EXPECT_TRUE(find_files(s.dir.path(), ".partial").empty());

  // Kills during the whole-job run (chunks, then assembly) never leave a torn output either.
  // A run may finish before its kill lands (a fast machine): the output is then complete and
  // its farm folder gone, and a further run rightly refuses the existing output (exit 73,
  // on_exists: fail), so the kills stop there.
  stdfs::remove_all(s.dir.file("out"));
  bool finished = false;
  for (int i = 0; i < 3 && !finished; ++i) {
    Background run(s.run_args(-1), s.dir.file("kill.log"));
    std::this_thread::sleep_for(std::chrono::duration<double>(whole(rng)));
    run.signal(SIGKILL);
    const int rc = run.wait();
    EXPECT_TRUE(rc == 0 || rc == 128 + SIGKILL) << rc << ": " << run.output();
    finished = rc == 0;
    if (exists(s.dir.file("out/x2.mp4"))) {
      EXPECT_EQ(probe(s.dir.file("out/x2.mp4")).video_frames, 100);
    }
  }
  if (!finished) {
    const CommandResult rerun = run_command(s.run_args(-1));
    ASSERT_EQ(rerun.exit_code, 0) << rerun.output;
  }
  EXPECT_TRUE(same_bytes(s.dir.file("out/x2.mp4"), s.dir.file("ref/x2.mp4")));
}

TEST(Farm, SigtermStopsWithExit75AndTheRerunCompletes) {
  KillSetup s;
  std::vector<std::string> args = s.run_args(1);
  args[args.size() - 3] = "farm";  // --progress farm: one line per slice
  Background run(args, s.dir.file("term.log"));
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string out = run.output();
        return out.find("Progress: ") != std::string::npos &&
               out.find("Progress: 0%") != out.rfind("Progress: ");
      },
      30))
      << run.output();
  const int percent_at_signal = last_percent(run.output());
  run.signal(SIGTERM);
  const int rc = run.wait();
  EXPECT_EQ(rc, 75) << run.output();
  // It stops at the next slice boundary: once the signal is seen, no slice is started; only the
  // slices already in flight (tokens 3, plus the one the source holds ready) may still be
  // written. The chunk is 10 slices of 5 frames, 10% each.
  const int percent_at_exit = last_percent(run.output());
  EXPECT_LT(percent_at_exit, 100) << run.output();
  EXPECT_LE(percent_at_exit - percent_at_signal, (3 + 1) * 10) << run.output();
  EXPECT_NE(run.output().find("rerun"), std::string::npos) << run.output();
  EXPECT_TRUE(segments_of(s.dir.file("out/x2.mp4")).empty())
      << "an interrupted chunk has no segment";
  EXPECT_TRUE(find_files(s.dir.path(), ".partial").empty()) << "the partial segment is removed";

  CommandResult again = run_command(s.run_args(1));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  // The journal knows where it stopped, and that is where the first run's progress ended.
  const size_t at = again.output.find("stopped after ");
  ASSERT_NE(at, std::string::npos) << again.output;
  const int frames_done = std::atoi(again.output.c_str() + at + 14);
  EXPECT_LT(frames_done, 50) << again.output;
  EXPECT_EQ(frames_done * 2, percent_at_exit) << run.output() << again.output;
  ASSERT_EQ(run_command(s.run_args(-1)).exit_code, 0);  // chunk 0, then assemble
  ASSERT_EQ(run_command({wmbatch_path(), "run", s.dir.file("ref.yaml"), "--chunk-frames", "50",
                         "--progress", "none"})
                .exit_code,
            0);
  EXPECT_TRUE(same_bytes(s.dir.file("out/x2.mp4"), s.dir.file("ref/x2.mp4")));
}

TEST(Farm, SameChunkTwiceAtOnceRunsItOnce) {
  KillSetup s;
  Background first(s.run_args(0), s.dir.file("a.log"));
  Background second(s.run_args(0), s.dir.file("b.log"));
  EXPECT_EQ(first.wait(), 0) << first.output();
  EXPECT_EQ(second.wait(), 0) << second.output();
  const std::string both = first.output() + second.output();
  EXPECT_EQ(count(both, "done, 50 frames"), 1) << both;
  EXPECT_EQ(count(both, "already done"), 1) << both;
  const auto segs = segments_of(s.dir.file("out/x2.mp4"));
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(probe(segs[0]).video_frames, 50);
}

TEST(Farm, FinishedChunkRerunsFastAndChangedInputIsRedone) {
  TempDir dir("farm-done");
  ClipSpec spec;
  spec.frames = 20;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out.mp4"));
  const std::vector<std::string> chunk0 = {wmbatch_path(), "run",        dir.file("job.yaml"),
                                           "--chunk",      "0",          "--chunk-frames",
                                           "10",           "--progress", "farm"};
  CommandResult r = run_command(chunk0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Progress lines for farm managers, on stdout.
  EXPECT_NE(r.output.find("Progress: 100%\n"), std::string::npos) << r.output;
  // The rerun decodes and encodes nothing: the chunk's segment is the same file, untouched.
  // (This used to be a bound on the rerun's wall time, which a loaded machine broke.)
  const std::vector<std::string> segs = segments_of(dir.file("out.mp4"));
  ASSERT_EQ(segs.size(), 1u);
  const auto stamp = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return std::make_pair(uint64_t(st.st_ino),
                          int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  };
  const auto segment_before = stamp(segs[0]);
  r = run_command(chunk0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("already done"), std::string::npos) << r.output;
  EXPECT_EQ(stamp(segs[0]), segment_before) << "the finished chunk was written again";

  // Assembled, the journal kept: a chunk rerun is still a no-op.
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk-frames", "10", "--keep-journal"}).exit_code,
            0);
  ASSERT_TRUE(exists(dir.file("out.mp4")));
  const std::string before = read_text(dir.file("out.mp4"));
  r = run_command(chunk0);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("already done"), std::string::npos) << r.output;

  // A changed input (new mtime and content) is redone, and the output rebuilt.
  spec.frames = 24;
  spec.gop = 5;
  make_clip(dir.file("in.mp4"), spec);
  r = wm({"run", dir.file("job.yaml"), "--chunk-frames", "10", "--log-level", "info"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "already done"), 0) << r.output;
  EXPECT_EQ(probe(dir.file("out.mp4")).video_frames, 24);
  EXPECT_TRUE(read_text(dir.file("out.mp4")) != before) << "rebuilt from the new input";
}

TEST(Farm, ExitCodes) {
  TempDir dir("farm-codes");
  ClipSpec spec;
  spec.frames = 12;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out.mp4"));
  // A chunk that does not exist, a bad range, a bad job: never worth retrying.
  CommandResult r = wm({"run", dir.file("job.yaml"), "--chunk", "9", "--chunk-frames", "4"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("chunk 9 does not exist"), std::string::npos) << r.output;
  EXPECT_EQ(wm({"run", dir.file("job.yaml"), "--frames", "7-3"}).exit_code, 64);
  EXPECT_EQ(wm({"run", dir.file("job.yaml"), "--frames", "40-50"}).exit_code, 65);
  write_text(dir.file("bad.yaml"), "input: in.mp4\noutput: o.mp4\nencode: {crf: 99}\n");
  r = wm({"run", dir.file("bad.yaml"), "--chunk", "0"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("bad.yaml:3"), std::string::npos) << r.output;
  EXPECT_EQ(wm({"plan", dir.file("bad.yaml")}).exit_code, 65);
  EXPECT_EQ(wm({"plan", dir.file("missing.yaml")}).exit_code, 66);
  EXPECT_EQ(wm({"run"}).exit_code, 64);
  // The chunk index from the environment, as Slurm and Kubernetes set it.
  ::setenv("JOB_COMPLETION_INDEX", "1", 1);
  r = wm({"run", dir.file("job.yaml"), "--chunk-frames", "4"});
  ::unsetenv("JOB_COMPLETION_INDEX");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chunk 1 "), std::string::npos) << r.output;
  // Assembling with chunks missing: worth retrying later (1), and the message says which.
  r = wm({"assemble", dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("frames 0-3, 8-11 are not done"), std::string::npos) << r.output;
  EXPECT_FALSE(exists(dir.file("out.mp4")));
  // An output someone else made, with on_exists: fail (the default): 73, untouched.
  write_text(dir.file("other.mp4"), "precious");
  write_text(dir.file("other.yaml"), job_text("in.mp4", "other.mp4"));
  EXPECT_EQ(wm({"run", dir.file("other.yaml"), "--chunk", "0"}).exit_code, 73);
  EXPECT_EQ(read_text(dir.file("other.mp4")), "precious");
  // A damaged segment is found by assemble, forgotten, and redone by its chunk.
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "0", "--chunk-frames", "4"}).exit_code, 0);
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "2", "--chunk-frames", "4"}).exit_code, 0);
  const auto segs = segments_of(dir.file("out.mp4"));
  ASSERT_EQ(segs.size(), 3u);
  write_text(segs[1], "garbage");
  r = wm({"assemble", dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rerun its chunk"), std::string::npos) << r.output;
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk-frames", "4"}).exit_code, 0);
  EXPECT_EQ(probe(dir.file("out.mp4")).video_frames, 12);
}

// `assemble` killed after its rename but before its output row: the journal then holds no output
// row (cleared here, the state such a kill leaves), and the rerun must know the complete output
// as its own (exit 0, file untouched), not refuse it as someone else's (73, never retried).
TEST(Farm, AssembleKilledAfterItsRenameIsDoneOnRerun) {
  TempDir dir("farm-renamed");
  ClipSpec spec;
  spec.frames = 12;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out.mp4"));
  CommandResult r = wm({"run", dir.file("job.yaml"), "--chunk-frames", "4", "--keep-journal"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string assembled = read_text(dir.file("out.mp4"));
  {
    sched::Journal journal(dir.file("out.mp4.wmfarm/journal.sqlite"), false);
    journal.clear_output();
  }
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"assemble", dir.file("job.yaml"), "--keep-journal"},
        std::vector<std::string>{"run", dir.file("job.yaml"), "--chunk-frames", "4",
                                 "--keep-journal"}}) {
    SCOPED_TRACE(args[0]);
    r = wm(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(read_text(dir.file("out.mp4")), assembled);
  }
  sched::Journal journal(dir.file("out.mp4.wmfarm/journal.sqlite"), false);
  ASSERT_TRUE(journal.output().has_value()) << "the output row is restored";
  EXPECT_EQ(journal.output()->frames, 12);
}

// A damaged journal says so and how to recover, with exit 65 (a retry would fail the same way).
TEST(Farm, DamagedJournalIsReportedWithTheWayOut) {
  TempDir dir("farm-damaged");
  ClipSpec spec;
  spec.frames = 8;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out.mp4"));
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "0", "--chunk-frames", "4"}).exit_code, 0);
  write_text(dir.file("out.mp4.wmfarm/journal.sqlite"), std::string(4096, 'z'));
  CommandResult r = wm({"run", dir.file("job.yaml"), "--chunk", "1", "--chunk-frames", "4"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("the farm journal is damaged"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("remove " + dir.file("out.mp4.wmfarm")), std::string::npos) << r.output;
  // Following the advice works.
  stdfs::remove_all(dir.file("out.mp4.wmfarm"));
  r = wm({"run", dir.file("job.yaml"), "--chunk-frames", "4"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out.mp4")).video_frames, 8);
}

// Changed encoder options redo the chunks (they were missing from the hand-kept fingerprint);
// every other key is covered by FarmFingerprint in test_farm_plan.cpp.
TEST(Farm, ChangedEncoderOptionsAreRedone) {
  TempDir dir("farm-options");
  ClipSpec spec;
  spec.frames = 8;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out.mp4"));
  const std::vector<std::string> chunk0 = {
      wmbatch_path(),   "run", dir.file("job.yaml"), "--chunk", "0",
      "--chunk-frames", "4",   "--progress",         "none"};
  ASSERT_EQ(run_command(chunk0).exit_code, 0);
  write_text(dir.file("job.yaml"),
             job_text("in.mp4", "out.mp4", "{preset: superfast, options: {g: 2}}"));
  CommandResult r = run_command(chunk0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "already done"), 0) << r.output;
  EXPECT_NE(r.output.find("redoing"), std::string::npos) << r.output;
}

// encode_latents of a video is planned in frames like reconstruct (tests/integration/
// test_encode_chunks.cpp): a short input is one chunk, whose latent segment assembly turns into
// the output (.safetensors inputs, with no video stream to cut, are farmed by input).
TEST(Farm, LatentTasksRunOneChunkPerInput) {
  TempDir dir("farm-latents");
  ClipSpec spec;
  spec.width = 64;
  spec.height = 48;
  spec.frames = 5;
  spec.audio = false;
  make_clip(dir.file("a.mp4"), spec);
  make_clip(dir.file("b.mp4"), spec);
  const std::string weights = golden_file("weights.safetensors");
  write_text(dir.file("job.yaml"),
             "task: encode_latents\ninput: '*.mp4'\noutput: lat/{stem}.safetensors\n"
             "model: {kind: wan2.1-vae, weights: " +
                 weights + ", dim: 16}\n");
  CommandResult plan = wm({"plan", dir.file("job.yaml")});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto chunks = nlohmann::json::parse(plan.output.substr(plan.output.find('{')))["chunks"];
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_FALSE(chunks[1]["whole_input"].get<bool>());
  EXPECT_NE(chunks[1]["output"].get<std::string>().find("lat/b.safetensors"), std::string::npos);
  CommandResult r = wm({"run", dir.file("job.yaml"), "--chunk", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(exists(dir.file("lat/b.safetensors.wmfarm/seg-00000000-00000004.safetensors")));
  EXPECT_FALSE(exists(dir.file("lat/a.safetensors")));
  EXPECT_EQ(wm({"assemble", dir.file("job.yaml")}).exit_code, 1) << "chunk 0 is missing";
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "0"}).exit_code, 0);
  r = wm({"assemble", dir.file("job.yaml"), "--keep-journal"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(exists(dir.file("lat/a.safetensors")));
  EXPECT_TRUE(exists(dir.file("lat/b.safetensors")));
  r = wm({"run", dir.file("job.yaml"), "--chunk", "0"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("already done"), std::string::npos) << r.output;
  EXPECT_EQ(wm({"run", dir.file("job.yaml"), "--frames", "0-3"}).exit_code, 64)
      << "--frames needs a job file with one input";
}

TEST(Farm, HelpListsTheFarmCommands) {
  CommandResult r = wm({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* want :
       {"--report", "--progress", "--keep-going", "--log-level", "--version", "wmbatch plan",
        "wmbatch run", "wmbatch assemble", "wmbatch submit", "75  interrupted"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want;
  }
  r = wm({"run", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* want : {"--chunk", "--frames", "--chunk-frames", "SLURM_ARRAY_TASK_ID", "75"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << r.output;
  }
}

}  // namespace
}  // namespace wm::test
