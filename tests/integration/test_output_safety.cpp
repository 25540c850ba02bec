// Nothing lost, nothing silently dropped (issue 15): the real wmbatch binary on job files whose
// mistakes must be found before any job runs, outputs that must never be lost or mixed up, and
// signals that must leave nothing behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

// Lines: 1 task, 2 input, 3 output, 4 model, 5 encode, 6 preset, 7- `encode_lines` (indented
// by two spaces: more keys of encode).
std::string job_text(const std::string& input, const std::string& output,
                     const std::string& encode_lines = "") {
  return "task: upscale\ninput: " + input + "\noutput: " + output +
         "\nmodel: {kind: lanczos, scale: 2}\nencode:\n  preset: ultrafast\n" + encode_lines;
}

void small_clip(const std::string& path, int frames = 4) {
  ClipSpec spec;
  spec.frames = frames;
  spec.audio = false;
  make_clip(path, spec);
}

// Files under `dir` (recursively) whose name contains `part`.
std::vector<std::string> files_named(const std::string& dir, const std::string& part) {
  std::vector<std::string> out;
  for (const auto& e : stdfs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path());
  }
  return out;
}

// --- strict validation: the encoder settings, before any job of the file runs -----------------

struct EncoderCase {
  const char* encode;  // more keys of the second job's encode map, from line 14
  const char* error;   // expected "job.yaml:LINE: KEY: problem"
};

class EncoderSettings : public ::testing::TestWithParam<EncoderCase> {};

TEST_P(EncoderSettings, AreCheckedBeforeAnyJobRuns) {
  TempDir dir("enc-check");
  small_clip(dir.file("a.mp4"));
  // Job 1 is fine; job 2 (lines 8-) has the mistake. Nothing may run.
  write_text(dir.file("job.yaml"), job_text("a.mp4", "first/{stem}.mkv") + "---\n" +
                                       job_text("a.mp4", "second/{stem}.mkv", GetParam().encode));
  CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find(dir.file("job.yaml") + ":" + GetParam().error), std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("first"))) << "job 1 ran before job 2 was checked";
}

INSTANTIATE_TEST_SUITE_P(
    Job, EncoderSettings,
    ::testing::Values(
        EncoderCase{"  codec: libx246\n", "14: encode.codec: no video encoder named 'libx246'"},
        EncoderCase{"  pix_fmt: yuv420q\n", "14: encode.pix_fmt: no pixel format named 'yuv420q'"},
        EncoderCase{"  codec: libx264\n  pix_fmt: rgb48le\n",
                    "15: encode.pix_fmt: encoder libx264 cannot take rgb48le"},
        EncoderCase{"  options:\n    tune: film\n    no_such_option: 1\n",
                    "16: encode.options.no_such_option: encoder libx264 has no option "
                    "'no_such_option'"},
        EncoderCase{"  options:\n    g: twelve\n",
                    "15: encode.options.g: encoder libx264 rejects 'twelve' for option 'g'"}));

// Outputs whose muxer writes files itself (HLS, DASH) cannot be written atomically: they are
// refused at validation, and nothing is written. (Images are written atomically by the image
// task: tests/integration/test_image_jobs.cpp.)
TEST(OutputSafety, SelfWritingContainersAreRefusedAtValidation) {
  TempDir dir("nofile");
  small_clip(dir.file("a.mp4"));
  for (const char* output : {"hls/{stem}.m3u8", "dash/{stem}.mpd"}) {
    SCOPED_TRACE(output);
    write_text(dir.file("job.yaml"), job_text("a.mp4", output));
    CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, 65) << r.output;
    EXPECT_NE(r.output.find("job.yaml:3: output:"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("cannot be written atomically"), std::string::npos) << r.output;
    for (const char* folder : {"img", "hls", "dash"}) EXPECT_FALSE(exists(dir.file(folder)));
  }
}

// --- outputs never mixed up --------------------------------------------------------------------

TEST(OutputSafety, TwoInputsOnOneOutputAreRefusedNamingBoth) {
  TempDir dir("collide");
  stdfs::create_directories(dir.file("x"));
  stdfs::create_directories(dir.file("y"));
  small_clip(dir.file("a.mp4"));
  small_clip(dir.file("a.mkv"));
  small_clip(dir.file("x/a.mp4"));
  small_clip(dir.file("y/a.mp4"));
  struct Case {
    std::string input, a, b;
  };
  for (const Case& c :
       {Case{"[a.mp4, a.mkv]", "a.mp4", "a.mkv"}, Case{"'[xy]/*.mp4'", "x/a.mp4", "y/a.mp4"}}) {
    SCOPED_TRACE(c.input);
    write_text(dir.file("job.yaml"), job_text(c.input, "out/{stem}.mp4"));
    CommandResult r = wmbatch({dir.file("job.yaml")});
    EXPECT_EQ(r.exit_code, 65) << r.output;
    EXPECT_NE(r.output.find("job.yaml:3: output: inputs " + dir.file(c.a) + " and " +
                            dir.file(c.b) + " would both write " + dir.file("out/a.mp4")),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(exists(dir.file("out/a.mp4"))) << "nothing runs";
  }
}

TEST(OutputSafety, OutputThatIsAFolderIsRefusedUpFront) {
  TempDir dir("outdir");
  small_clip(dir.file("a.mp4"));
  small_clip(dir.file("b.mp4"));
  stdfs::create_directories(dir.file("out/b.mkv"));  // b's output is a folder
  write_text(dir.file("job.yaml"), job_text("[a.mp4, b.mp4]", "out/{stem}.mkv"));
  CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 73) << r.output;
  EXPECT_NE(r.output.find(dir.file("out/b.mkv") + ": output is an existing folder"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("out/a.mkv"))) << "refused before any input was processed";
  EXPECT_TRUE(stdfs::is_directory(dir.file("out/b.mkv")));
}

// Two processes writing one output take turns (a lock on the final path; each writes its own
// temp file): the second sees the first's finished file, and a run that reports success has its
// own result there.
struct TwoWriters {
  TempDir dir{"two-writers"};
  TwoWriters() {
    ClipSpec spec;
    spec.width = 320;
    spec.height = 240;
    spec.frames = 60;
    spec.audio = false;
    make_clip(dir.file("clip.mp4"), spec);
  }
  void job(const std::string& name, int scale, const std::string& on_exists) {
    write_text(dir.file(name),
               "input: clip.mp4\noutput: out/{stem}.mkv\nmodel: {kind: lanczos, "
               "scale: " +
                   std::to_string(scale) + "}\non_exists: " + on_exists + "\nslice_frames: 4\n");
  }
  // Runs both job files at once; their exit codes and logs.
  std::pair<int, int> run(const std::string& a, const std::string& b, std::string* log_a,
                          std::string* log_b) {
    Background first({wmbatch_path(), "--progress", "none", dir.file(a)}, dir.file(a + ".log"));
    Background second({wmbatch_path(), "--progress", "none", dir.file(b)}, dir.file(b + ".log"));
    const int rc_a = first.wait(), rc_b = second.wait();
    *log_a = first.output();
    *log_b = second.output();
    return {rc_a, rc_b};
  }
  void expect_nothing_left() {
    EXPECT_TRUE(files_named(dir.path(), ".partial").empty());
    EXPECT_TRUE(files_named(dir.path(), ".wmlock").empty());
  }
};

TEST(OutputSafety, TwoJobsWithOneOutputTakeTurnsAndTheLastWriterIsThere) {
  TwoWriters w;
  w.job("x2.yaml", 2, "overwrite");
  w.job("x3.yaml", 3, "overwrite");
  std::string log2, log3;
  const auto [rc2, rc3] = w.run("x2.yaml", "x3.yaml", &log2, &log3);
  ASSERT_EQ(rc2, 0) << log2;
  ASSERT_EQ(rc3, 0) << log3;
  const bool waited2 = log2.find("another process is writing it; waiting") != std::string::npos;
  const bool waited3 = log3.find("another process is writing it; waiting") != std::string::npos;
  ASSERT_NE(waited2, waited3) << "exactly one waits for the other:\n" << log2 << "\n" << log3;
  // The one that waited wrote last: the file is wholly its result.
  const Probe p = probe(w.dir.file("out/clip.mkv"));
  EXPECT_EQ(p.width, waited2 ? 640 : 960);
  EXPECT_EQ(p.video_frames, 60);
  w.expect_nothing_left();
}

TEST(OutputSafety, TheSameJobTwiceAtOnceFailsClearlyOnce) {
  TwoWriters w;
  w.job("job.yaml", 2, "fail");
  std::string log_a, log_b;
  const auto [rc_a, rc_b] = w.run("job.yaml", "job.yaml", &log_a, &log_b);
  EXPECT_EQ(std::min(rc_a, rc_b), 0) << log_a << log_b;
  EXPECT_EQ(std::max(rc_a, rc_b), 73) << log_a << log_b;
  const std::string& loser = rc_a == 73 ? log_a : log_b;
  EXPECT_NE(loser.find("output exists"), std::string::npos) << loser;
  EXPECT_EQ(probe(w.dir.file("out/clip.mkv")).video_frames, 60);
  w.expect_nothing_left();
}

// --report FILE never overwrites what the run reads.
TEST(OutputSafety, ReportRefusesAJobFileOrAnInput) {
  TempDir dir("report");
  small_clip(dir.file("a.mp4"));
  write_text(dir.file("job.yaml"), job_text("a.mp4", "out/{stem}.mkv"));
  const std::string job = read_text(dir.file("job.yaml"));
  const std::string clip = read_text(dir.file("a.mp4"));
  for (const std::string& target : {dir.file("job.yaml"), dir.file("a.mp4")}) {
    SCOPED_TRACE(target);
    CommandResult r = wmbatch({dir.file("job.yaml"), "--report", target});
    EXPECT_EQ(r.exit_code, 64) << r.output;
    EXPECT_NE(r.output.find("--report " + target + ": is the"), std::string::npos) << r.output;
    EXPECT_FALSE(exists(dir.file("out/a.mkv"))) << "refused before any work";
  }
  EXPECT_EQ(read_text(dir.file("job.yaml")), job);
  EXPECT_EQ(read_text(dir.file("a.mp4")), clip);
  // Another file is written whole, with no temp file left beside it.
  CommandResult r = wmbatch({dir.file("job.yaml"), "--report", dir.file("report.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(read_text(dir.file("report.json")))[0]["inputs"].size(), 1u);
  EXPECT_TRUE(files_named(dir.path(), ".partial").empty());
}

// --- signals ------------------------------------------------------------------------------------

// A run long enough to be signalled mid-way: 120 frames of 640x480 upscaled to 1280x960 and
// encoded with x264's medium preset (seconds of work, on any machine).
struct LongRun {
  TempDir dir{"signal"};
  LongRun() {
    ClipSpec spec;
    spec.width = 640;
    spec.height = 480;
    spec.frames = 120;
    spec.audio = false;
    make_clip(dir.file("in.mp4"), spec);
    write_text(dir.file("job.yaml"),
               "input: in.mp4\noutput: out/{stem}.mkv\n"
               "model: {kind: lanczos, scale: 2}\nslice_frames: 4\n");
  }
  // Starts wmbatch, waits until its partial output exists (it is writing), sends `sig`; returns
  // the exit code.
  int signal_mid_run(int sig, std::string* output) {
    Background run({wmbatch_path(), "--progress", "none", dir.file("job.yaml")},
                   dir.file("run.log"));
    const bool writing = wait_until(
        [&] {
          return exists(dir.file("out")) && !files_named(dir.file("out"), ".partial").empty();
        },
        60);
    EXPECT_TRUE(writing) << run.output();
    run.signal(sig);
    const int rc = run.wait();
    *output = run.output();
    return rc;
  }
};

TEST(OutputSafety, SighupStopsCleanlyLikeSigterm) {
  LongRun r;
  std::string output;
  EXPECT_EQ(r.signal_mid_run(SIGHUP, &output), 75) << output;
  EXPECT_FALSE(exists(r.dir.file("out/in.mkv")));
  EXPECT_TRUE(files_named(r.dir.path(), ".partial").empty()) << "the partial output is removed";
}

TEST(OutputSafety, InterruptedSummaryNamesTheInputAndTheResumeCommand) {
  LongRun r;
  std::string output;
  EXPECT_EQ(r.signal_mid_run(SIGTERM, &output), 75) << output;
  EXPECT_NE(
      output.find("failed: " + r.dir.file("in.mp4") + ": interrupted; " + r.dir.file("out/in.mkv") +
                  " was not written; resume with: wmbatch " + r.dir.file("job.yaml")),
      std::string::npos)
      << output;
}

}  // namespace
}  // namespace wm::test
