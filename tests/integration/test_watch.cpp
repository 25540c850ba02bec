// The watch-folder daemon end to end: the real `wmbatch watch` as a child process over folders of
// clips made by the test, the queue read back with SQLite, the status page over HTTP.
//  - WATCH.yaml validation: FILE:LINE: KEY: problem, exit 65 (`wmbatch watch --check`)
//  - a slow copy held open is taken once, after it is closed and settled; a rename-in is taken;
//    an abandoned `.part` never
//  - 200 files at once: each done once, in arrival order, peak RSS flat
//  - SIGKILL at seeded random points, restart each time: outputs identical to an uninterrupted
//    run, attempts say nothing was processed twice, the queue's chunk counts say no finished
//    chunk was redone (files resume from their last finished chunk), nothing partial at a final
//    path, no work folder left
//  - chunked (resumable) outputs carry what a whole-file run carries: the same decoded frames
//    and pts with a lossless codec, the same audio and subtitle packets
//  - a corrupt input goes to failed/ with its .error.txt; a retryable failure is retried
//  - SIGHUP with a bad WATCH.yaml keeps the old one; a good one is taken
//  - the status page: /api/status JSON, /metrics Prometheus text, HTML escaping
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tests/integration/test_watch_helpers.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

std::string watch_check(const std::string& file, int* exit_code) {
  const CommandResult r = run_command({wmbatch_path(), "watch", file, "--check"});
  *exit_code = r.exit_code;
  return r.output;
}

// Peak resident memory of a process, KiB (VmHWM).
long peak_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 6, "VmHWM:") == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST(WatchSpec, BadKeysAreReportedWithFileLineAndKey) {
  WatchSetup s("spec");
  const std::string good =
      "watch:\n"
      "  - folder: in\n"
      "    job: {task: upscale, model: {kind: lanczos, scale: 2}}\n"
      "    output: out/{stem}.mp4\n";
  write_text(s.watch_file(), good);
  int rc = -1;
  std::string out = watch_check(s.watch_file(), &rc);
  EXPECT_EQ(rc, 0) << out;

  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"settle_second: 1\n" + good, "WATCH.yaml:1: settle_second: unknown key"},
      {"max_parallel: 0\n" + good, "WATCH.yaml:1: max_parallel: must be between 1 and 256"},
      // Integers and numbers read as job files read them (src/yaml_load.h).
      {"max_parallel: 2.0\n" + good, "WATCH.yaml:1: max_parallel: must be an integer (got '2.0')"},
      {"poll_seconds: nan\n" + good, "WATCH.yaml:1: poll_seconds: must be a number (got 'nan')"},
      {"http: {listen: localhost}\n" + good, "WATCH.yaml:1: http.listen: must be HOST:PORT"},
      {"watch:\n  - folder: nowhere\n    job: {task: upscale}\n    output: out/{stem}.mp4\n",
       "WATCH.yaml:2: watch.folder: '"},
      {"watch:\n  - folder: in\n    job: {task: upscale, tokens: zero}\n    output: "
       "out/{stem}.mp4\n",
       "WATCH.yaml:3: tokens: must be an integer"},
      // One output for every file of a folder would overwrite itself: the job parser says so.
      {"watch:\n  - folder: in\n    job: {task: upscale}\n    output: out/x.mp4\n",
       "WATCH.yaml:4: output: must contain {stem}"},
      // Outputs that the folder would take again.
      {"watch:\n  - folder: in\n    job: {task: upscale}\n    output: in/{stem}_x2.mp4\n",
       "outputs would match input"},
      {"watch:\n  - folder: in\n    job: {task: upscale, input: a.mp4}\n    output: "
       "out/{stem}.mp4\n",
       "WATCH.yaml:3: watch.job.input: is filled in per file"},
      {good + "    on_done: move\n", "WATCH.yaml:2: watch.done_folder: required"},
      {good + "    on_done: trash\n", "WATCH.yaml:5: watch.on_done: must be keep, move or delete"},
  };
  for (const Case& c : cases) {
    write_text(s.watch_file(), c.text);
    out = watch_check(s.watch_file(), &rc);
    EXPECT_EQ(rc, 65) << c.text << "\n" << out;
    EXPECT_NE(out.find(c.expect), std::string::npos)
        << "expected: " << c.expect << "\ngot: " << out;
  }
}

TEST(Watch, SlowCopyHeldOpenIsTakenOnceAfterItSettles) {
  WatchSetup s("slow");
  s.write_config();
  const std::string clip = s.dir().file("clip.mp4");
  make_small_clip(clip);
  const std::string bytes = read_text(clip);
  Background& daemon = s.start();

  // Written in three pieces, held open throughout, each piece left until the daemon found it
  // settled at its size (its size and mtime held settle_seconds) and held it back because it is
  // open for writing (the debug line naming that size): only the open-for-writing check keeps
  // the daemon from taking a partial file. One more rescan after that line: the loop pass that
  // logged it has queued whatever it took.
  const std::string target = s.in("slow.mp4");
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const size_t third = bytes.size() / 3;
  for (int piece = 0; piece < 3; ++piece) {
    const size_t from = piece * third, to = piece == 2 ? bytes.size() : from + third;
    ASSERT_EQ(::write(fd, bytes.data() + from, to - from), ssize_t(to - from));
    const std::string held =
        "slow.mp4: still open for writing (" + std::to_string(to) + " bytes); waiting";
    ASSERT_TRUE(wait_until([&] {
      return s.log().find(held) != std::string::npos || !s.queue().empty();
    })) << s.log();
    ASSERT_TRUE(s.wait_scans(1)) << s.log();
    EXPECT_TRUE(s.queue().empty()) << "taken while still being written, at " << to << " bytes";
  }
  ::close(fd);
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  (void)daemon;

  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].attempts, 1);
  EXPECT_NE(s.log().find("slow.mp4: still open for writing"), std::string::npos) << s.log();
  const Probe p = probe(s.out("slow_x2.mp4"));
  EXPECT_EQ(p.video_frames, 8);
  EXPECT_EQ(p.width, 128);
  EXPECT_EQ(count_of(s.log(), "queued: " + target), 1);
}

TEST(Watch, RenamedInIsTakenAndAnAbandonedPartNever) {
  WatchSetup s("rename");
  s.write_config();
  make_small_clip(s.dir().file("clip.mp4"));
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("abandoned.mp4.part"));
  s.start();
  // Copied under a partial name, then renamed into place (rsync, browsers, most upload tools).
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("renamed.mp4.part"));
  stdfs::rename(s.in("renamed.mp4.part"), s.in("renamed.mp4"));
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  // Two more finished rescans that must still leave the .part alone (not even settling).
  ASSERT_TRUE(s.wait_scans(2)) << s.log();
  EXPECT_EQ(s.last_scan().second, 0) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();

  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u) << s.log();
  EXPECT_EQ(rows[0].input, s.in("renamed.mp4"));
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(probe(s.out("renamed_x2.mp4")).video_frames, 8);
  EXPECT_TRUE(exists(s.in("abandoned.mp4.part")));
  EXPECT_FALSE(exists(s.out("abandoned_x2.mp4")));
  EXPECT_EQ(s.log().find("abandoned"), std::string::npos) << s.log();
}

TEST(Watch, TwoHundredFilesAtOnceAreEachDoneOnceInArrivalOrderInFlatMemory) {
  constexpr int kFiles = 200;
  WatchSetup s("many");
  s.write_config("", "    on_done: delete\n");
  const std::string clip = s.dir().file("clip.mp4");
  make_small_clip(clip, 4, 32, 24);
  Background& daemon = s.start();
  // Arrival order is the reverse of name order, so that a queue sorted by name would show.
  std::vector<std::string> arrival;
  for (int i = 0; i < kFiles; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "f-%03d.mp4", kFiles - 1 - i);
    stdfs::copy_file(clip, s.in(name));
    arrival.push_back(s.in(name));
  }
  long rss_at_quarter = -1;
  ASSERT_TRUE(wait_until([&] {
    const int done = count_state(s.queue(), "done");
    if (rss_at_quarter < 0 && done >= kFiles / 4) rss_at_quarter = peak_rss_kib(daemon.pid());
    return done >= kFiles;
  })) << s.log();
  const long rss_at_end = peak_rss_kib(daemon.pid());
  EXPECT_EQ(s.stop(), 0) << s.log();

  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), size_t(kFiles));
  std::vector<std::string> order;
  double last_finish = 0;
  for (const QueueRow& r : rows) {
    EXPECT_EQ(r.state, "done") << r.input << ": " << r.last_error;
    EXPECT_EQ(r.attempts, 1) << r.input;
    EXPECT_GE(r.finished_at, last_finish) << r.input << " finished before an earlier arrival";
    last_finish = r.finished_at;
    order.push_back(r.input);
  }
  EXPECT_EQ(order, arrival) << "queue order must be arrival order";
  const std::string logs = s.log();
  for (const std::string& in : arrival) {
    EXPECT_EQ(count_of(logs, "done: " + in + " ->"), 1) << in;
    const std::string stem = stdfs::path(in).stem().string();
    EXPECT_TRUE(exists(s.out(stem + "_x2.mp4"))) << stem;
    EXPECT_FALSE(exists(in)) << "on_done: delete";
  }
  // Memory does not grow with the number of files: the peak after all 200 is the peak after
  // the first 50, give or take allocator noise.
  ASSERT_GT(rss_at_quarter, 0);
  std::printf("peak RSS after %d files: %ld KiB, after %d: %ld KiB\n", kFiles / 4, rss_at_quarter,
              kFiles, rss_at_end);
  EXPECT_LT(rss_at_end - rss_at_quarter, 16 * 1024)
      << "peak RSS grew from " << rss_at_quarter << " KiB to " << rss_at_end << " KiB";
}

// Every non-hidden file in out/ must be a whole output (the job writes under hidden names).
void expect_outputs_whole(const WatchSetup& s, int frames, std::set<std::string>& checked) {
  for (const std::string& name : list_dir(s.dir().file("out"))) {
    if (name[0] == '.' || checked.count(name)) continue;
    EXPECT_EQ(name.find(".partial"), std::string::npos) << name;
    EXPECT_EQ(probe(s.out(name)).video_frames, frames) << name << " is not whole";
    checked.insert(name);
  }
}

TEST(Watch, SigkillAtRandomPointsThenRestartGivesTheUninterruptedOutputsOnce) {
  // Long enough files that 10 kills land before the queue is done on an idle machine too; each
  // file is 8 chunks of 12 frames, so kills land between finished chunks of a file.
  constexpr int kFiles = 12, kFrames = 96, kChunkFrames = 12;
  const std::string chunks = "chunk_frames: " + std::to_string(kChunkFrames) + "\n";
  WatchSetup ref("kill-ref"), s("kill");
  ref.write_config(chunks);
  s.write_config(chunks + "max_parallel: 2\n");  // two files in flight: kills land in both
  const std::string clip = s.dir().file("clip.mp4");
  make_small_clip(clip, kFrames, 320, 240);
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = "k" + std::to_string(i) + ".mp4";
    stdfs::copy_file(clip, ref.in(name));
    stdfs::copy_file(clip, s.in(name));
  }
  // The reference: one uninterrupted run.
  ref.start();
  ASSERT_TRUE(ref.wait_finished(kFiles)) << ref.log();
  ASSERT_EQ(ref.stop(), 0) << ref.log();

  std::mt19937 rng(20261124);
  std::uniform_int_distribution<int> delay_ms(30, 500), coin(0, 1), chunks_first(1, 3);
  auto chunks_done = [&] {
    int n = 0;
    for (const auto& [id, cs] : read_chunks(s.queue_file())) {
      for (const ChunkRowT& c : cs) n += c.done;
    }
    return n;
  };
  int kills = 0, mid_run = 0;  // kills, and those that hit a file being processed
  std::set<std::string> checked;
  for (;;) {
    Background& d = s.start();
    // Enough kills, or the queue finished while the last run was being killed: this run ends it.
    if ((kills >= 10 && kills % 2 == 0) || count_state(s.queue(), "done") == kFiles) {
      // Enough kills: let it finish.
      ASSERT_TRUE(s.wait_finished(kFiles)) << s.log();
      break;
    }
    // Half the kills at a time from the start, half a time after a few more chunks finished (so
    // that kills land between finished chunks of a file however fast the machine is).
    if (coin(rng) == 1) {
      const int want = chunks_done() + chunks_first(rng);
      ASSERT_TRUE(wait_until([&] {
        return chunks_done() >= want || count_state(s.queue(), "done") == kFiles || d.exited();
      })) << s.log();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    d.signal(SIGKILL);
    EXPECT_EQ(d.wait(), 128 + SIGKILL);
    ++kills;
    const std::string run_log = s.log();
    mid_run += count_of(run_log, ": started (attempt") > count_of(run_log, "done: ");
    expect_outputs_whole(s, kFrames, checked);
    ASSERT_LT(kills, 200) << "no progress";
  }
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_GE(kills, 10) << "the queue finished before 10 kills: make the work longer";
  EXPECT_GE(mid_run, 5) << "most kills must land while a file is being processed";
  std::printf("%d kills, %d while a file was being processed\n", kills, mid_run);

  expect_outputs_whole(s, kFrames, checked);
  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), size_t(kFiles));
  int reruns = 0;
  const std::string logs = s.all_logs();
  for (const QueueRow& r : rows) {
    EXPECT_EQ(r.state, "done") << r.input << ": " << r.last_error;
    EXPECT_EQ(r.failures, 0) << r.input;
    EXPECT_GE(r.attempts, 1) << r.input;
    // An item runs again only when a kill interrupted it.
    EXPECT_LE(r.attempts, 1 + r.interrupted) << r.input;
    reruns += r.attempts - 1;
    // Logged after the queue says done, so a kill in between may leave it out: never twice.
    EXPECT_LE(count_of(logs, "done: " + r.input + " ->"), 1) << r.input << " finished twice";
    EXPECT_LE(count_of(logs, r.input + ": started"), r.attempts) << r.input;
    const std::string name = stdfs::path(r.output).filename().string();
    EXPECT_EQ(read_text(r.output), read_text(ref.out(name)))
        << name << ": differs from the uninterrupted run";
  }
  EXPECT_LE(reruns, 2 * kills) << "a kill interrupts at most max_parallel (2) files";
  for (const std::string& name : list_dir(s.dir().file("out"))) {
    EXPECT_NE(name[0], '.') << name << ": a staging file or work folder left behind";
  }

  // Resume within a file: every chunk of every file finished, none started again after it had
  // finished, and the chunks restarted are only those a kill interrupted.
  const auto chunk_rows = read_chunks(s.queue_file());
  int restarted = 0, resumed_files = 0;
  for (const QueueRow& r : rows) {
    ASSERT_TRUE(chunk_rows.count(r.id)) << r.input << ": no chunks recorded";
    const auto& cs = chunk_rows.at(r.id);
    EXPECT_EQ(cs.size(), size_t(kFrames / kChunkFrames)) << r.input;
    int64_t next = 0;
    for (const ChunkRowT& c : cs) {
      const std::string what =
          r.input + " frames " + std::to_string(c.first_frame) + "-" + std::to_string(c.last_frame);
      EXPECT_EQ(c.first_frame, next) << what;
      next = c.last_frame + 1;
      EXPECT_TRUE(c.done) << what;
      EXPECT_EQ(c.frames, kChunkFrames) << what;
      EXPECT_GE(c.starts, 1) << what;
      EXPECT_EQ(c.starts, c.starts_at_done) << what << ": started again after it had finished";
      restarted += c.starts - 1;
    }
    // A run that found finished chunks of this file (its work folder is named by the item id).
    std::istringstream lines(logs);
    const std::string work = "/.wmwatch-" + std::to_string(r.id) + "-";
    for (std::string line; std::getline(lines, line);) {
      if (line.find(work) != std::string::npos && line.find("): already done (") != line.npos) {
        ++resumed_files;
        break;
      }
    }
  }
  std::printf("%d chunk restarts, %d files resumed after a finished chunk\n", restarted,
              resumed_files);
  EXPECT_LE(restarted, 2 * kills) << "a kill interrupts at most max_parallel (2) chunks";
  EXPECT_GE(resumed_files, 1) << "no kill landed after a finished chunk: make the work longer";
}

TEST(Watch, SigtermStopsTheRunningFileAtASliceBoundaryAndItResumesOnRestart) {
  // 10 chunks: after the first, enough work is left for the status checks below (a `wmbatch
  // status` process starts LibTorch: ~0.5 s) before SIGTERM, however fast the machine.
  constexpr int kFrames = 480, kChunkFrames = 48;
  WatchSetup s("term");
  s.write_config("http: {listen: 127.0.0.1:0}\nchunk_frames: " + std::to_string(kChunkFrames) +
                 "\n");
  const std::string clip = s.dir().file("clip.mp4");
  make_small_clip(clip, kFrames, 320, 240);
  Background& daemon = s.start();
  stdfs::copy_file(clip, s.in("long.mp4"));
  ASSERT_TRUE(wait_until([&] { return s.log().find("long.mp4: started") != std::string::npos; }))
      << s.log();
  // Live progress of the running file on the status page.
  nlohmann::json running;
  ASSERT_TRUE(wait_until([&] {
    const auto [code, body] = http_get(s.http_port(), "/api/status");
    if (code != 200) return false;
    running = nlohmann::json::parse(body)["running"];
    // Stopped after a chunk finished, so that the restart has something to resume.
    return running.size() == 1 && running[0]["frames"].get<int64_t>() > 0 &&
           running[0]["chunks_done"].get<int64_t>() >= 1;
  })) << s.log();
  EXPECT_EQ(running[0]["input"], s.in("long.mp4"));
  EXPECT_EQ(running[0]["frames_total"], kFrames);
  EXPECT_GT(running[0]["fps"].get<double>(), 0);
  EXPECT_TRUE(running[0]["eta_seconds"].is_number()) << running.dump();
  // `wmbatch status` (reading the queue) shows the file's progress too.
  const CommandResult status = run_command({wmbatch_path(), "status", s.watch_file()});
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("long.mp4  "), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("/" + std::to_string(kFrames) + " frames ("), std::string::npos)
      << status.output;
  EXPECT_NE(status.output.find("chunk(s) done"), std::string::npos) << status.output;
  const auto term = std::chrono::steady_clock::now();
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(), 0) << s.log();
  std::printf("SIGTERM to exit: %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - term).count());
  ASSERT_NE(s.log().find("long.mp4: stopped; it starts again on the next run"), std::string::npos)
      << "the file finished before SIGTERM: make the clip longer\n"
      << s.log();
  {
    const auto rows = s.queue();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].state, "queued");
    EXPECT_EQ(rows[0].interrupted, 1);
    EXPECT_EQ(rows[0].failures, 0) << "an interruption is not a failure";
    EXPECT_FALSE(exists(s.out("long_x2.mp4")));
  }
  s.start();
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].attempts, 2);
  EXPECT_EQ(probe(s.out("long_x2.mp4")).video_frames, kFrames);
  for (const std::string& name : list_dir(s.dir().file("out"))) {
    EXPECT_NE(name[0], '.') << name << ": left behind";
  }
  // The restart resumed: the chunks finished before SIGTERM ran once, only the one it stopped
  // ran twice.
  EXPECT_NE(s.log().find("): already done ("), std::string::npos) << s.log();
  const auto chunks = read_chunks(s.queue_file())[rows[0].id];
  ASSERT_EQ(chunks.size(), size_t(kFrames / kChunkFrames));
  EXPECT_EQ(chunks.front().starts, 1) << "the first chunk finished before SIGTERM";
  int restarted = 0;
  for (const ChunkRowT& c : chunks) {
    EXPECT_TRUE(c.done) << c.first_frame;
    EXPECT_EQ(c.starts, c.starts_at_done) << c.first_frame << ": started again after it finished";
    restarted += c.starts - 1;
  }
  EXPECT_LE(restarted, 1) << "only the chunk SIGTERM stopped is redone";
}

// The resumable (chunked) output against a whole-file run of the same job: with a lossless codec
// the same decoded frames and pts; the same audio and subtitle packets, streams and tags. (Not
// the same bytes: every chunk starts with a keyframe of its own encoder.)
TEST(Watch, ChunkedOutputCarriesWhatAWholeFileRunCarries) {
  constexpr int kFrames = 30;
  WatchSetup chunked("chunked"), whole("whole");
  auto config = [](const std::string& chunk_frames) {
    return "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: " + chunk_frames +
           "\n"
           "watch:\n"
           "  - folder: in\n"
           "    job:\n"
           "      task: upscale\n"
           "      model: {kind: lanczos, scale: 2}\n"
           "      encode: {codec: ffv1, pix_fmt: yuv444p}\n"
           "    output: out/{stem}_x2.mkv\n";
  };
  write_text(chunked.watch_file(), config("10"));
  write_text(whole.watch_file(), config("0"));
  ClipSpec spec;
  spec.frames = kFrames;
  spec.subtitles = true;
  spec.container_ext = ".mkv";
  spec.gop = 7;  // source keyframes that do not line up with the chunks
  make_clip(chunked.in("c.mkv"), spec);
  stdfs::copy_file(chunked.in("c.mkv"), whole.in("c.mkv"));
  for (WatchSetup* s : {&chunked, &whole}) {
    s->start();
    ASSERT_TRUE(s->wait_finished(1)) << s->log();
    ASSERT_EQ(s->stop(), 0) << s->log();
    ASSERT_EQ(s->queue().at(0).state, "done") << s->queue().at(0).last_error;
  }
  const auto chunk_rows = read_chunks(chunked.queue_file());
  ASSERT_EQ(chunk_rows.size(), 1u);
  EXPECT_EQ(chunk_rows.begin()->second.size(), 3u) << "three chunks of 10 frames";
  EXPECT_TRUE(read_chunks(whole.queue_file()).empty()) << "chunk_frames: 0 runs whole files";

  const std::string a = chunked.out("c_x2.mkv"), b = whole.out("c_x2.mkv");
  const auto fa = read_all(a), fb = read_all(b);
  ASSERT_EQ(fa.size(), size_t(kFrames));
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    EXPECT_EQ(fa[i].pts, fb[i].pts) << "frame " << i;
    EXPECT_TRUE(fa[i].image.data == fb[i].image.data) << "frame " << i;
  }
  const Probe pa = probe(a), pb = probe(b);
  EXPECT_EQ(pa.width, 128);
  EXPECT_EQ(pa.width, pb.width);
  EXPECT_EQ(pa.video_time_base.num, pb.video_time_base.num);
  EXPECT_EQ(pa.video_time_base.den, pb.video_time_base.den);
  EXPECT_EQ(pa.audio_streams, pb.audio_streams);
  EXPECT_EQ(pa.audio_language, "eng");
  EXPECT_EQ(pa.audio_language, pb.audio_language);
  EXPECT_EQ(pa.subtitle_streams, 1);
  EXPECT_EQ(pa.subtitle_packets, pb.subtitle_packets);
  const auto audio = dump_packets(a, AVMEDIA_TYPE_AUDIO);
  ASSERT_FALSE(audio.empty());
  EXPECT_TRUE(audio == dump_packets(b, AVMEDIA_TYPE_AUDIO)) << "audio copied once, unchanged";
  EXPECT_TRUE(dump_packets(a, AVMEDIA_TYPE_SUBTITLE) == dump_packets(b, AVMEDIA_TYPE_SUBTITLE));
  for (const std::string& name : list_dir(chunked.dir().file("out"))) {
    EXPECT_NE(name[0], '.') << name << ": work folder left behind";
  }
}

TEST(Watch, ANewVersionOfAFileIsProcessedAgainTheSameVersionNever) {
  WatchSetup s("version");
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 0.5\n"
             "watch:\n"
             "  - folder: in\n"
             "    job: {task: upscale, model: {kind: lanczos, scale: 2}, on_exists: overwrite}\n"
             "    output: out/{stem}_x2.mp4\n");
  make_small_clip(s.dir().file("v1.mp4"), 8);
  make_small_clip(s.dir().file("v2.mp4"), 12);
  s.start();
  stdfs::copy_file(s.dir().file("v1.mp4"), s.in("a.mp4"));
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  // The same version stays in the folder (on_done: keep) and is seen by rescans: never again,
  // not even a file settling. Two finished rescans: the first walks the folder after the item
  // was done, and a candidate it made would have settled (settle_seconds 0.3 < poll_seconds 0.5)
  // and been queued by the end of the second.
  ASSERT_TRUE(s.wait_scans(2)) << s.log();
  EXPECT_EQ(s.last_scan().second, 0) << s.log();
  EXPECT_EQ(s.queue().size(), 1u) << s.log();
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 8);
  // A new version (another size and mtime) is a new item.
  stdfs::copy_file(s.dir().file("v2.mp4"), s.in("a.mp4"), stdfs::copy_options::overwrite_existing);
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input, rows[1].input);
  EXPECT_EQ(rows[1].state, "done") << rows[1].last_error;
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 12);
}

TEST(Watch, CorruptInputGoesToFailedWithItsError) {
  WatchSetup s("corrupt");
  s.write_config();
  s.start();
  write_text(s.in("bad.mp4"), std::string(4096, 'x'));
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();

  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, "failed");
  EXPECT_EQ(rows[0].exit_code, 65);
  EXPECT_EQ(rows[0].attempts, 1) << "bad input is not retried";
  EXPECT_NE(rows[0].last_error.find("bad.mp4"), std::string::npos) << rows[0].last_error;
  EXPECT_FALSE(exists(s.in("bad.mp4")));
  EXPECT_TRUE(exists(s.dir().file("failed/bad.mp4")));
  const std::string note = read_text(s.dir().file("failed/bad.mp4.error.txt"));
  EXPECT_NE(note.find("error: " + rows[0].last_error), std::string::npos) << note;
  EXPECT_NE(note.find("exit_code: 65"), std::string::npos) << note;
  EXPECT_FALSE(exists(s.out("bad_x2.mp4")));
}

TEST(Watch, RetryableFailureIsRetriedAfterBackoff) {
  WatchSetup s("retry");
  // The output folder is a file: creating it fails with exit 73, which may pass.
  write_text(s.dir().file("blocked"), "not a folder");
  s.write_config("retry: {max_attempts: 3, backoff_seconds: 1}\n");
  std::string config = read_text(s.watch_file());
  config.replace(config.find("out/{stem}"), 10, "blocked/{stem}");
  write_text(s.watch_file(), config);
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("a.mp4"));
  ASSERT_TRUE(wait_until([&] {
    const auto rows = s.queue();
    return !rows.empty() && rows[0].failures == 1;
  })) << s.log();
  {
    const auto rows = s.queue();
    EXPECT_EQ(rows[0].state, "queued") << "a retryable failure waits for its back-off";
    EXPECT_EQ(rows[0].exit_code, 73);
  }
  stdfs::remove(s.dir().file("blocked"));
  stdfs::create_directory(s.dir().file("blocked"));
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();

  const auto rows = s.queue();
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].attempts, 2);
  EXPECT_EQ(rows[0].failures, 1);
  EXPECT_NE(s.log().find("attempt 1 of 3, retrying in 1.0 s"), std::string::npos) << s.log();
  EXPECT_EQ(probe(s.dir().file("blocked/a_x2.mp4")).video_frames, 8);
}

TEST(Watch, SighupWithABadWatchFileKeepsTheOldOne) {
  WatchSetup s("hup");
  s.write_config();
  make_small_clip(s.dir().file("clip.mp4"));
  Background& daemon = s.start();
  const std::string good = read_text(s.watch_file());

  write_text(s.watch_file(), "settle_second: 1\n" + good);
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_until([&] { return s.log().find("reload failed") != std::string::npos; }))
      << s.log();
  EXPECT_NE(s.log().find("WATCH.yaml:1: settle_second: unknown key"), std::string::npos) << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("a.mp4"));
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_TRUE(exists(s.out("a_x2.mp4"))) << "the old configuration keeps working";

  // A good file is taken: files follow the new output template, a.mp4 (kept in the folder) too:
  // its fingerprint holds the job's settings, and they changed.
  std::string renamed = good;
  renamed.replace(renamed.find("{stem}_x2"), 9, "{stem}_v2");
  write_text(s.watch_file(), renamed);
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_until([&] { return s.log().find("reloaded ") != std::string::npos; }))
      << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("b.mp4"));
  ASSERT_TRUE(s.wait_finished(3)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_TRUE(exists(s.out("b_v2.mp4"))) << s.log();
  EXPECT_TRUE(exists(s.out("a_v2.mp4"))) << s.log();
  EXPECT_FALSE(exists(s.out("b_x2.mp4")));
  EXPECT_EQ(s.queue().size(), 3u);
}

TEST(Watch, StatusPageServesJsonMetricsAndEscapedHtml) {
  WatchSetup s("http");
  s.write_config("http: {listen: 127.0.0.1:0}\n");
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  const int port = s.http_port();
  ASSERT_GT(port, 0) << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("ok.mp4"));
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("<script>alert(1)<.mp4"));
  write_text(s.in("bad.mp4"), "not a video");
  ASSERT_TRUE(s.wait_finished(3)) << s.log();

  const auto [code, body] = http_get(port, "/api/status");
  ASSERT_EQ(code, 200) << body;
  const auto status = nlohmann::json::parse(body);
  EXPECT_EQ(status["counts"]["done"], 2);
  EXPECT_EQ(status["counts"]["failed"], 1);
  EXPECT_EQ(status["counts"]["queued"], 0);
  EXPECT_EQ(status["totals"]["frames"], 16);
  ASSERT_EQ(status["history"].size(), 3u);
  ASSERT_EQ(status["failures"].size(), 1u);
  EXPECT_NE(status["failures"][0]["error"].get<std::string>().find("bad.mp4"), std::string::npos);
  EXPECT_EQ(status["failures"][0]["exit_code"], 65);

  const auto [mcode, metrics_text] = http_get(port, "/metrics");
  ASSERT_EQ(mcode, 200);
  const auto metrics = parse_metrics(metrics_text);
  EXPECT_EQ(metrics.at("wmbatch_watch_files_processed_total"), 2);
  EXPECT_EQ(metrics.at("wmbatch_watch_files_failed_total"), 1);
  EXPECT_EQ(metrics.at("wmbatch_watch_frames_total"), 16);
  EXPECT_EQ(metrics.at("wmbatch_watch_queue_length"), 0);
  EXPECT_EQ(metrics.at("wmbatch_watch_items{state=\"done\"}"), 2);
  EXPECT_GT(metrics.at("wmbatch_watch_processing_seconds_total"), 0);
  EXPECT_GT(metrics.at("wmbatch_watch_peak_rss_bytes"), 0);

  const auto [hcode, html] = http_get(port, "/");
  ASSERT_EQ(hcode, 200);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;.mp4"), std::string::npos) << html;
  EXPECT_EQ(html.find("<script>"), std::string::npos) << "a file name must never become markup";
  EXPECT_EQ(http_get(port, "/nothing").first, 404);

  // `wmbatch status` reads the same queue from another process.
  const CommandResult text = run_command({wmbatch_path(), "status", s.watch_file()});
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("queued 0, running 0, done 2, failed 1"), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("bad.mp4"), std::string::npos) << text.output;
  const CommandResult json = run_command({wmbatch_path(), "status", s.watch_file(), "--json"});
  EXPECT_EQ(nlohmann::json::parse(json.output)["counts"]["done"], 2) << json.output;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace wm::test
