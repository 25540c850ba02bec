// The front door (issue 26), as a user coming from Video2X, Real-ESRGAN's script or ffmpeg meets
// it: the real wmbatch binary with one-line commands, models by name, pipes through the real
// ffmpeg CLI, folders as inputs, -y/-n, the hints and the small things of the run's lines.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

const std::string kSrvggPth =
    std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/srvgg-tiny/model.pth";

void small_clip(const std::string& path, int frames = 6, bool audio = false) {
  ClipSpec spec;
  spec.frames = frames;
  spec.audio = audio;
  make_clip(path, spec);
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// `script` run by sh (pipes), stdout and stderr together.
CommandResult shell(const std::string& script) { return run_command({"sh", "-c", script}); }

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

CommandResult upscale(std::vector<std::string> args) {
  args.insert(args.begin(), {wmbatch_path(), "upscale"});
  args.insert(args.end(), {"--progress", "none", "--preset", "ultrafast"});
  return run_command(args);
}

// --- one-line commands --------------------------------------------------------------------------

TEST(FrontDoor, OneLinerWritesWhatItsPrintedJobFileWrites) {
  TempDir dir("fd-oneliner");
  small_clip(dir.file("in.mp4"));
  // Video2X's spelling: -i IN -o OUT -s N.
  CommandResult r = upscale({"-i", dir.file("in.mp4"), "-o", dir.file("out") + "/", "-s", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Probe p = probe(dir.file("out/in.mp4"));
  EXPECT_EQ(p.width, 64 * 3);
  EXPECT_EQ(p.height, 48 * 3);
  EXPECT_EQ(p.video_frames, 6);
  // The summary names what it wrote.
  EXPECT_NE(r.output.find("wmbatch: 1 done, 0 skipped, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  wrote: " + dir.file("out/in.mp4")), std::string::npos) << r.output;

  // --print-job prints a job file (stdout only) that runs the same job.
  r = run_command({wmbatch_path(), "upscale", dir.file("in.mp4"), "-o", dir.file("out") + "/", "-s",
                   "3", "--preset", "ultrafast", "--print-job"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("wmbatch:"), std::string::npos) << "only the job: " << r.output;
  EXPECT_NE(r.output.find("task: upscale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scale: 3"), std::string::npos) << r.output;
  write_text(dir.file("job.yaml"), r.output);
  const std::string first = read_text(dir.file("out/in.mp4"));
  stdfs::rename(dir.file("out/in.mp4"), dir.file("first.mp4"));
  r = run_command({wmbatch_path(), "--progress", "none", dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(read_text(dir.file("out/in.mp4")) == first) << "the job file wrote other bytes";
}

TEST(FrontDoor, YesAndNoAsFfmpegTakesThem) {
  TempDir dir("fd-yes-no");
  small_clip(dir.file("in.mp4"), 3);
  const std::string out = dir.file("out.mp4");
  ASSERT_EQ(upscale({dir.file("in.mp4"), "-o", out}).exit_code, 0);
  const int64_t before = mtime_ns(out);
  CommandResult r = upscale({dir.file("in.mp4"), "-o", out});
  EXPECT_EQ(r.exit_code, 73) << r.output;
  EXPECT_NE(r.output.find("output exists"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-y or -n"), std::string::npos) << r.output;
  r = upscale({dir.file("in.mp4"), "-o", out, "-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 done, 1 skipped"), std::string::npos) << r.output;
  EXPECT_EQ(mtime_ns(out), before);
  r = upscale({dir.file("in.mp4"), "-o", out, "-y"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(mtime_ns(out), before) << "-y overwrites";
  EXPECT_EQ(upscale({dir.file("in.mp4"), "-o", out, "-y", "-n"}).exit_code, 64);
  // On job runs too: the job says fail, -n skips, -y overwrites.
  write_text(dir.file("job.yaml"), "input: in.mp4\noutput: out.mp4\nencode: {preset: ultrafast}\n");
  EXPECT_EQ(wmbatch({dir.file("job.yaml")}).exit_code, 73);
  r = wmbatch({dir.file("job.yaml"), "-n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("0 done, 1 skipped"), std::string::npos) << r.output;
  const int64_t again = mtime_ns(out);
  EXPECT_EQ(wmbatch({dir.file("job.yaml"), "-y"}).exit_code, 0);
  EXPECT_NE(mtime_ns(out), again);
}

TEST(FrontDoor, AVideoWhereAJobFileGoesShowsTheOneLiner) {
  TempDir dir("fd-hint");
  small_clip(dir.file("a.mp4"), 2);
  CommandResult r = wmbatch({dir.file("a.mp4")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1) << "one line: " << r.output;
  EXPECT_NE(r.output.find(dir.file("a.mp4") +
                          " is a video, not a job file; to upscale it: "
                          "wmbatch upscale " +
                          dir.file("a.mp4") + " -o " + dir.file("a_x2.mp4")),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("a_x2.mp4")));
  // Without an extension: the bytes say it is no job file.
  stdfs::copy_file(dir.file("a.mp4"), dir.file("clip"));
  r = wmbatch({dir.file("clip")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(r.output.find("is a video, not a job file"), std::string::npos) << r.output;
  write_text(dir.file("z.safetensors"), "x");
  r = wmbatch({dir.file("z.safetensors")});
  EXPECT_NE(r.output.find("wmbatch decode-latents"), std::string::npos) << r.output;
}

TEST(FrontDoor, CommandLineMistakesNameTheOption) {
  TempDir dir("fd-mistakes");
  small_clip(dir.file("in.mp4"), 2);
  CommandResult r = upscale({dir.file("in.mp4"), "-o", dir.file("o.mp4"), "--scale", "5"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale: --scale: must be 2, 3 or 4 (got 5)"), std::string::npos)
      << r.output;
  r = upscale({dir.file("in.mp4"), "-o", dir.file("o.mp4"), "--codec", "libx246"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale: --codec: no video encoder named 'libx246'"),
            std::string::npos)
      << r.output;
  r = upscale({dir.file("in.mp4")});
  EXPECT_EQ(r.exit_code, 64) << r.output;
  EXPECT_NE(r.output.find("no output given"), std::string::npos) << r.output;
  r = upscale({dir.file("nothing*.mp4"), "-o", dir.file("o/")});
  EXPECT_EQ(r.exit_code, 66) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale: input: no file matches"), std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("o.mp4")));
}

// --- models by name -----------------------------------------------------------------------------

TEST(FrontDoor, ModelsByNameFromTheModelsFolder) {
  TempDir dir("fd-models");
  stdfs::create_directories(dir.file("models"));
  // A tiny SRVGG network (Real-ESRGAN's layout, x4) under a released name.
  stdfs::copy_file(kSrvggPth, dir.file("models/realesr-animevideov3.pth"));
  small_clip(dir.file("in.mp4"), 2);
  CommandResult r =
      upscale({dir.file("in.mp4"), "-o", dir.file("x4.mp4"), "--model", "realesr-animevideov3",
               "--models-dir", dir.file("models"), "--report", dir.file("r.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("x4.mp4")).width, 64 * 4);
  // The report names the model and the sizes.
  const auto report = nlohmann::json::parse(read_text(dir.file("r.json")));
  const auto& model = report[0]["model"];
  EXPECT_EQ(model["kind"], "realesrgan");
  EXPECT_EQ(model["name"], "realesr-animevideov3");
  EXPECT_EQ(model["scale"], 4);
  EXPECT_EQ(model["weights"], dir.file("models/realesr-animevideov3.pth"));
  const auto& in = report[0]["inputs"][0];
  EXPECT_EQ(in["width"], 64);
  EXPECT_EQ(in["height"], 48);
  EXPECT_EQ(in["output_width"], 256);
  EXPECT_EQ(in["output_height"], 192);

  // The environment's folder, and a job file naming the model (no kind: the name says it).
  write_text(dir.file("job.yaml"),
             "input: in.mp4\noutput: job.mp4\nmodel: {weights: realesr-animevideov3}\n"
             "encode: {preset: ultrafast}\n");
  r = run_command({"env", "WMBATCH_MODELS=" + dir.file("models"), wmbatch_path(), "--progress",
                   "none", dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("job.mp4")).width, 64 * 4);

  // `wmbatch models`: the folder's files with kind, scale and size; the released names missing
  // with where they come from.
  r = run_command({wmbatch_path(), "models", "--models-dir", dir.file("models")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Models folder: " + dir.file("models") + " (from --models-dir)"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("realesr-animevideov3 +realesrgan +x4 +[0-9.]+ KiB +"
                                             "realesr-animevideov3\\.pth")))
      << r.output;
  EXPECT_NE(r.output.find("https://github.com/xinntao/Real-ESRGAN/releases/download/v0.1.0/"
                          "RealESRGAN_x4plus.pth"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("configs/models.yaml"), std::string::npos) << r.output;

  // An unknown name: what was searched, what is there (exit 66, before any work).
  r = upscale({dir.file("in.mp4"), "-o", dir.file("no.mp4"), "--model", "realesr-animevideo",
               "--models-dir", dir.file("models")});
  EXPECT_EQ(r.exit_code, 66) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale: --model: model 'realesr-animevideo': none of "
                          "realesr-animevideo.pth, realesr-animevideo.safetensors"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("it holds realesr-animevideov3.pth"), std::string::npos) << r.output;
  EXPECT_FALSE(exists(dir.file("no.mp4")));
}

TEST(FrontDoor, WeightsProblemsAreFoundBeforeAnyInputRuns) {
  TempDir dir("fd-weights");
  small_clip(dir.file("a.mp4"), 2);
  // Job 1 is fine; job 2's weights file is missing: exit 66 before job 1 runs.
  write_text(dir.file("job.yaml"),
             "input: a.mp4\noutput: first/{stem}.mp4\n---\ninput: a.mp4\noutput: second/{stem}.mp4"
             "\nmodel:\n  kind: realesrgan\n  weights: models/missing.pth\n");
  CommandResult r = wmbatch({dir.file("job.yaml")});
  EXPECT_EQ(r.exit_code, 66) << r.output;
  EXPECT_NE(r.output.find(dir.file("job.yaml") + ":8: model.weights: " +
                          dir.file("models/missing.pth") + ": No such file or directory"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(exists(dir.file("first")));
  // kind: torchscript given a Real-ESRGAN checkpoint says which kind reads it.
  write_text(dir.file("ts.yaml"),
             "input: a.mp4\noutput: ts.mp4\nmodel:\n  kind: torchscript\n"
             "  weights: " +
                 kSrvggPth + "\n");
  r = wmbatch({dir.file("ts.yaml")});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("ts.yaml:5: model.weights: " + kSrvggPth +
                          " is a checkpoint of weights (torch.save), not a TorchScript module; "
                          "for a Real-ESRGAN .pth use kind: realesrgan"),
            std::string::npos)
      << r.output;
}

// --- pipes --------------------------------------------------------------------------------------

// ffmpeg → wmbatch → ffmpeg, lossless all the way: the frames of the file run.
TEST(FrontDoor, PipesThroughTheFfmpegCli) {
  TempDir dir("fd-pipes");
  small_clip(dir.file("in.mp4"), 8, /*audio=*/true);
  CommandResult r = upscale({dir.file("in.mp4"), "-o", dir.file("file.mkv"), "--codec", "ffv1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = shell("ffmpeg -v error -i " + quoted(dir.file("in.mp4")) +
            " -c:v ffv1 -c:a pcm_s16le -f nut - | " + quoted(wmbatch_path()) +
            " upscale - -o - --format nut --codec ffv1 --progress plain --report " +
            quoted(dir.file("r.json")) + " 2> " + quoted(dir.file("err.log")) +
            " | ffmpeg -v error -i - -c copy " + quoted(dir.file("piped.mkv")));
  const std::string log = read_text(dir.file("err.log"));
  ASSERT_EQ(r.exit_code, 0) << r.output << log;
  const auto piped = read_all(dir.file("piped.mkv"));
  const auto file = read_all(dir.file("file.mkv"));
  ASSERT_EQ(piped.size(), 8u);
  ASSERT_EQ(file.size(), 8u);
  for (size_t i = 0; i < piped.size(); ++i) {
    EXPECT_TRUE(piped[i].image.data == file[i].image.data) << "frame " << i;
  }
  // The log went to stderr; the last progress line has no frame count to go by.
  EXPECT_NE(log.find("wmbatch: 1 done, 0 skipped, 0 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("  wrote: standard output"), std::string::npos) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("pipe:0: 8 frames, [0-9.]+ fps, 0:[0-9]{2}\n")))
      << log;
  EXPECT_EQ(log.find("/0 frames"), std::string::npos) << log;
  // The audio went through too: standard input is read again for it.
  const Probe piped_probe = probe(dir.file("piped.mkv"));
  EXPECT_TRUE(piped_probe.has_audio);
  EXPECT_NEAR(piped_probe.audio_duration, probe(dir.file("in.mp4")).audio_duration, 0.05);
  const auto report = nlohmann::json::parse(read_text(dir.file("r.json")));
  EXPECT_TRUE(report[0]["inputs"][0]["dropped"].empty()) << report.dump(1);
}

TEST(FrontDoor, StandardOutputHoldsTheStreamAlone) {
  TempDir dir("fd-stdout");
  small_clip(dir.file("in.mp4"), 5);
  for (const std::string format : {"nut", "mkv", "ts", "y4m"}) {
    SCOPED_TRACE(format);
    const std::string out = dir.file("out." + format);
    CommandResult r = shell(quoted(wmbatch_path()) + " upscale " + quoted(dir.file("in.mp4")) +
                            " -o - -f " + format + " --log-level debug 1> " + quoted(out) + " 2> " +
                            quoted(dir.file("err.log")));
    const std::string log = read_text(dir.file("err.log"));
    ASSERT_EQ(r.exit_code, 0) << log;
    EXPECT_NE(log.find("] debug: "), std::string::npos) << "the log is on stderr: " << log;
    const Probe p = probe(out);  // fails on anything but the stream
    EXPECT_EQ(p.video_frames, 5);
    EXPECT_EQ(p.width, 128);
    if (format == "y4m") {
      EXPECT_EQ(p.codec, "rawvideo");
    }
  }
  // /dev/stdout means the same.
  CommandResult r = shell(quoted(wmbatch_path()) + " upscale " + quoted(dir.file("in.mp4")) +
                          " -o /dev/stdout -f nut --progress none 2>/dev/null | wc -c");
  EXPECT_GT(std::stol(r.output), 1000) << r.output;
  // Without --format: which to give.
  r = upscale({dir.file("in.mp4"), "-o", "-"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale: -o: standard output needs format: mkv, nut, y4m or ts"),
            std::string::npos)
      << r.output;
}

TEST(FrontDoor, StandardInputRefusesMp4WithOneLine) {
  TempDir dir("fd-stdin");
  small_clip(dir.file("in.mp4"), 4);
  CommandResult r = shell("cat " + quoted(dir.file("in.mp4")) + " | " + quoted(wmbatch_path()) +
                          " upscale pipe:0 -o " + quoted(dir.file("o.mkv")) + " --progress none");
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("pipe:0: an MP4/MOV stream cannot be read from a pipe: it needs "
                          "seeking"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("moov"), std::string::npos) << "no libav lines: " << r.output;
  EXPECT_FALSE(exists(dir.file("o.mkv")));
  // MPEG-TS and Y4M on /dev/stdin are read.
  for (const char* format : {"mpegts", "yuv4mpegpipe"}) {
    SCOPED_TRACE(format);
    r = shell("ffmpeg -v error -i " + quoted(dir.file("in.mp4")) + " -f " + format + " - | " +
              quoted(wmbatch_path()) + " upscale /dev/stdin -o " + quoted(dir.file("o.mkv")) +
              " -y --progress none");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(probe(dir.file("o.mkv")).video_frames, 4);
  }
}

// --- folders as inputs --------------------------------------------------------------------------

TEST(FrontDoor, AFolderIsItsFilesInNameOrder) {
  TempDir dir("fd-folder");
  stdfs::create_directories(dir.file("photos"));
  ClipSpec image;
  image.frames = 1;
  image.audio = false;
  image.codec = "png";
  image.pix_fmt = "rgb24";
  for (const char* name : {"b.png", "a.png", "c.png"}) make_clip(dir.file("photos/") + name, image);
  write_text(dir.file("photos/notes.txt"), "not an image");
  CommandResult r =
      run_command({wmbatch_path(), "upscale", dir.file("photos"), "-o", dir.file("out/"),
                   "--progress", "plain", "--report", dir.file("r.json")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"a.png", "b.png", "c.png"}) {
    EXPECT_EQ(probe(dir.file("out/") + name).width, 128) << name;
  }
  EXPECT_NE(r.output.find("left out, not video, image or tensor files by their names: notes.txt"),
            std::string::npos)
      << r.output;
  const auto report = nlohmann::json::parse(read_text(dir.file("r.json")));
  ASSERT_EQ(report[0]["inputs"].size(), 3u);
  EXPECT_EQ(report[0]["inputs"][0]["input"], dir.file("photos/a.png"));
  EXPECT_EQ(report[0]["inputs"][2]["input"], dir.file("photos/c.png"));
  // Images do not log "0/0 frames".
  EXPECT_EQ(r.output.find("0/0 frames"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir.file("photos/a.png") + ": 1 frame, "), std::string::npos) << r.output;
}

// --- the small things ---------------------------------------------------------------------------

TEST(FrontDoor, HelpAndVersion) {
  CommandResult r = wmbatch({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(count(r.output, "Usage:"), 1) << r.output;
  EXPECT_EQ(r.output.find("{false}"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wmbatch upscale IN... -o OUT"), std::string::npos) << r.output;
  r = run_command({wmbatch_path(), "upscale", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* want : {"--model", "--scale", "--tile", "--precision", "-y,--overwrite",
                           "--print-job", "--format", "ffmpeg -i in.mp4 -f nut -"}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want;
  }
  // --version without LibTorch: a copy of the binary alone in a folder says the module is
  // missing and still prints every version.
  TempDir dir("fd-version");
  stdfs::copy_file(wmbatch_path(), dir.file("wmbatch"));
  stdfs::permissions(dir.file("wmbatch"), stdfs::perms::owner_exec, stdfs::perm_options::add);
  r = run_command({dir.file("wmbatch"), "--version"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FFmpeg: libavformat "), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("LibTorch: [0-9]+\\.[0-9]+"))) << r.output;
  EXPECT_NE(r.output.find("wmbatch-torch.so (missing)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CUDA: "), std::string::npos) << r.output;
}

TEST(FrontDoor, TheLastProgressLineSaysHowLongItTook) {
  TempDir dir("fd-progress");
  small_clip(dir.file("in.mp4"), 4);
  CommandResult r = run_command({wmbatch_path(), "upscale", dir.file("in.mp4"), "-o",
                                 dir.file("o.mp4"), "--progress", "bar", "--preset", "ultrafast"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The bar's last state, before its newline.
  const size_t end = r.output.find("\n", r.output.find("4/4 frames"));
  const std::string last =
      r.output.substr(r.output.rfind('\r', end), end - r.output.rfind('\r', end));
  EXPECT_NE(last.find("100% 4/4 frames"), std::string::npos) << last;
  EXPECT_TRUE(std::regex_search(last, std::regex(" in [0-9]+:[0-9]{2} "))) << last;
  EXPECT_EQ(last.find("ETA"), std::string::npos) << last;
}

TEST(FrontDoor, FarmRunsTellTheirChunkSizeAndTidyUp) {
  TempDir dir("fd-farm");
  ClipSpec spec;
  spec.frames = 12;
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"),
             "input: in.mp4\noutput: out.mp4\nmodel: {kind: lanczos, scale: 2}\n"
             "encode: {preset: superfast}\n");
  // Chunk 0 with the plan's size; chunk 2 without it takes the size from the journal.
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "0", "--chunk-frames", "4"}).exit_code, 0);
  CommandResult r = wm({"run", dir.file("job.yaml"), "--chunk", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--chunk-frames 4 (as the earlier runs of this plan"), std::string::npos)
      << r.output;
  ASSERT_EQ(wm({"run", dir.file("job.yaml"), "--chunk", "1"}).exit_code, 0);
  // --frames A-B is no chunk of the plan: no "chunk -1".
  write_text(dir.file("range.yaml"),
             "input: in.mp4\noutput: range.mp4\nmodel: {kind: lanczos, scale: 2}\n");
  r = wm({"run", dir.file("range.yaml"), "--frames", "0-3", "--chunk-frames", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("chunk -1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("frames (" + dir.file("range.mp4") + ", frames 0-3)"), std::string::npos)
      << r.output;
  // Assembled: the work folder goes (--keep-journal keeps it).
  r = wm({"assemble", dir.file("job.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(probe(dir.file("out.mp4")).video_frames, 12);
  EXPECT_FALSE(exists(dir.file("out.mp4.wmfarm")));
  write_text(dir.file("kept.yaml"), "input: in.mp4\noutput: kept.mp4\n");
  ASSERT_EQ(wm({"run", dir.file("kept.yaml"), "--chunk-frames", "4", "--keep-journal"}).exit_code,
            0);
  EXPECT_TRUE(exists(dir.file("kept.mp4.wmfarm/journal.sqlite")));
  ASSERT_EQ(wm({"run", dir.file("kept.yaml"), "--chunk-frames", "4"}).exit_code, 0);
  EXPECT_FALSE(exists(dir.file("kept.mp4.wmfarm"))) << "the rerun, done, tidies up";
  // A chunk past the default plan, with no journal to say otherwise: what the plan used.
  write_text(dir.file("fresh.yaml"), "input: in.mp4\noutput: fresh.mp4\n");
  r = wm({"run", dir.file("fresh.yaml"), "--chunk", "2"});
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("with --chunk-frames 240 (the default); run takes the --chunk-frames "
                          "that plan was given"),
            std::string::npos)
      << r.output;
}

// `cmake --install` puts configs/ where the installed binary reads its table.
TEST(FrontDoor, TheInstalledBinaryReadsTheInstalledTable) {
  TempDir dir("fd-install");
  CommandResult r = run_command({"cmake", "--install", WM_BINARY_DIR, "--prefix", dir.path()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* file :
       {"bin/wmbatch", "bin/wmbatch-torch.so", "share/wmbatch/models.yaml",
        "share/wmbatch/WATCH.example.yaml", "share/wmbatch/jobs/upscale-animevideov3.yaml",
        "share/wmbatch/jobs/stream.yaml"}) {
    EXPECT_TRUE(exists(dir.file(file))) << file;
  }
  r = run_command({dir.file("bin/wmbatch"), "models", "--models-dir", dir.file("models")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Table of released names: " + dir.file("share/wmbatch/models.yaml")),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("does not exist yet"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace wm::test
