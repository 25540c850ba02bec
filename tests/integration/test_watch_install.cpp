// The watch daemon as shipped and installed (issue 26, points 5 and 6), through the real
// `wmbatch watch` / `wmbatch status` and the real `cmake --install`:
//  - relative paths: an entry's own `output:` resolves against WATCH.yaml's folder, a job file's
//    `output:` against the job file's folder (both in one WATCH.yaml, both run)
//  - `wmbatch status --json` says whether a daemon holds the queue (and its pid): not before it
//    starts, yes while it runs, not after it is killed (its pid still written in the lock file)
//  - /metrics: the in-progress frames and fps gauges of a running file
//  - the page: moved files at their new paths, the failures' attempts and exit codes, the folder,
//    times with their zone, durations as people read them
//  - the installed systemd unit: the install prefix's paths, StateDirectory,
//  RestartPreventExitStatus,
//    ExecStartPre --check, the docs it names installed; `systemd-analyze verify` passes where
//    systemd-analyze is installed
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/integration/test_watch_helpers.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

nlohmann::json status_json(const WatchSetup& s) {
  const CommandResult r = run_command({wmbatch_path(), "status", s.watch_file(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

TEST(WatchInstall, RelativeOutputsResolveWhereTheyWereWritten) {
  WatchSetup s("paths");
  stdfs::create_directories(s.dir().file("jobs"));
  stdfs::create_directories(s.dir().file("in2"));
  const std::string job =
      "task: upscale\nmodel: {kind: lanczos, scale: 2}\n"
      "encode: {codec: libx264, preset: ultrafast, crf: 20}\n";
  write_text(s.dir().file("jobs/up.yaml"), job);
  write_text(s.dir().file("jobs/up_own.yaml"), job + "output: made/{stem}_own.mp4\n");
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\nwatch:\n"
             "  - folder: in\n"
             "    job: jobs/up.yaml\n"
             "    output: upscaled/{stem}_x2.mp4\n"  // the entry's: beside WATCH.yaml
             "  - folder: in2\n"
             "    job: jobs/up_own.yaml\n");  // the job file's output: beside the job file
  int code = run_command({wmbatch_path(), "watch", s.watch_file(), "--check"}).exit_code;
  ASSERT_EQ(code, 0);
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("a.mp4"));
  stdfs::copy_file(s.dir().file("clip.mp4"), s.dir().file("in2/b.mp4"));
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  EXPECT_EQ(count_state(s.queue(), "done"), 2) << s.log();
  EXPECT_TRUE(exists(s.dir().file("upscaled/a_x2.mp4"))) << s.log();
  EXPECT_FALSE(exists(s.dir().file("jobs/upscaled"))) << "the entry's output is WATCH.yaml's";
  EXPECT_TRUE(exists(s.dir().file("jobs/made/b_own.mp4"))) << s.log();
  EXPECT_FALSE(exists(s.dir().file("made"))) << "the job file's output is the job file's";
  EXPECT_EQ(probe(s.dir().file("upscaled/a_x2.mp4")).width, 128);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchInstall, StatusSaysWhetherTheDaemonRuns) {
  WatchSetup s("alive");
  s.write_config();
  EXPECT_EQ(status_json(s)["daemon"], false) << "no queue yet";
  Background& daemon = s.start();
  nlohmann::json j = status_json(s);
  EXPECT_EQ(j["daemon"], true) << j.dump();
  EXPECT_EQ(j["daemon_pid"], int64_t(daemon.pid())) << j.dump();
  const CommandResult text = run_command({wmbatch_path(), "status", s.watch_file()});
  EXPECT_NE(text.output.find("daemon running (pid " + std::to_string(daemon.pid()) + ")"),
            std::string::npos)
      << text.output;
  // Killed: the lock file still holds its pid, but no process holds the lock.
  daemon.signal(SIGKILL);
  EXPECT_EQ(daemon.wait(), 128 + SIGKILL);
  ASSERT_NE(read_text(s.queue_file() + ".lock").find(std::to_string(daemon.pid())),
            std::string::npos);
  j = status_json(s);
  EXPECT_EQ(j["daemon"], false) << j.dump();
  EXPECT_FALSE(j.contains("daemon_pid")) << j.dump();
  EXPECT_NE(
      run_command({wmbatch_path(), "status", s.watch_file()}).output.find("daemon not running"),
      std::string::npos);
  // Started again: running again (a stale pid does not stop it, and status sees the new one).
  Background& again = s.start();
  j = status_json(s);
  EXPECT_EQ(j["daemon"], true) << j.dump();
  EXPECT_EQ(j["daemon_pid"], int64_t(again.pid())) << j.dump();
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_EQ(status_json(s)["daemon"], false);
}

TEST(WatchInstall, MetricsHaveTheRunningFilesFramesAndFps) {
  WatchSetup s("gauges");
  s.write_config("http: {listen: 127.0.0.1:0}\nchunk_frames: 48\n");
  make_small_clip(s.dir().file("clip.mp4"), 480, 320, 240);
  s.start();
  ASSERT_GT(s.http_port(), 0) << s.log();
  auto metrics = parse_metrics(http_get(s.http_port(), "/metrics").second);
  EXPECT_EQ(metrics.at("wmbatch_watch_frames_in_progress"), 0);
  EXPECT_EQ(metrics.at("wmbatch_watch_fps"), 0);
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("long.mp4"));
  ASSERT_TRUE(wait_until([&] {
    metrics = parse_metrics(http_get(s.http_port(), "/metrics").second);
    return metrics.count("wmbatch_watch_frames_in_progress") &&
           metrics.at("wmbatch_watch_frames_in_progress") > 0;
  })) << s.log();
  EXPECT_GT(metrics.at("wmbatch_watch_fps"), 0);
  EXPECT_LE(metrics.at("wmbatch_watch_frames_in_progress"), 480);
  EXPECT_EQ(metrics.at("wmbatch_watch_running"), 1);
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  metrics = parse_metrics(http_get(s.http_port(), "/metrics").second);
  EXPECT_EQ(metrics.at("wmbatch_watch_frames_in_progress"), 0);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchInstall, StatusPageShowsWhereFilesAreNowAndWhyTheyFailed) {
  WatchSetup s("page");
  s.write_config("http: {listen: 127.0.0.1:0}\n", "    on_done: move\n    done_folder: done\n");
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  ASSERT_GT(s.http_port(), 0) << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("ok.mp4"));
  write_text(s.in("bad.mp4"), "not a video");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  ASSERT_TRUE(wait_until([&] {
    const auto rows = s.queue();
    return rows.size() == 2 && rows[0].disposed && rows[1].disposed;
  })) << s.log();
  const auto [code, html] = http_get(s.http_port(), "/");
  ASSERT_EQ(code, 200);
  const size_t at = html.find("<table id=\"history\">");
  ASSERT_NE(at, std::string::npos) << html;
  const std::string history = html.substr(at);
  // Moved files at their new paths, with the path they were taken as.
  EXPECT_NE(history.find(s.dir().file("done/ok.mp4") + "<br><small>taken as " + s.in("ok.mp4")),
            std::string::npos)
      << history;
  EXPECT_NE(history.find(s.dir().file("failed/bad.mp4") + "<br><small>taken as "),
            std::string::npos)
      << history;
  // The failure's attempts and exit code; the folder and job; times with their zone; durations.
  EXPECT_NE(history.find("<td>1</td><td>65</td>"), std::string::npos) << history;
  EXPECT_NE(history.find("<td>" + s.dir().file("in") + "<br><small>job: inline</small></td>"),
            std::string::npos)
      << history;
  EXPECT_NE(history.find(" UTC</td>"), std::string::npos) << history;
  EXPECT_NE(history.find(" s</td>"), std::string::npos) << history;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// Where systemd-analyze is, or "" (it needs no running systemd: `verify` reads unit files).
std::string systemd_analyze() {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    const std::string path = std::string(dir) + "/systemd-analyze";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

TEST(WatchInstall, TheInstalledUnitNamesThePrefixAndVerifies) {
  TempDir dir("watch-install");
  const CommandResult install =
      run_command({"cmake", "--install", WM_BINARY_DIR, "--prefix", dir.path()});
  ASSERT_EQ(install.exit_code, 0) << install.output;
  const std::string unit = dir.file("lib/systemd/system/wmbatch-watch.service");
  ASSERT_TRUE(exists(unit)) << install.output;
  const std::string text = read_text(unit);
  const std::string bin = dir.file("bin/wmbatch");
  EXPECT_NE(text.find("\nExecStart=" + bin + " watch /etc/wmbatch/WATCH.yaml\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nExecStartPre=" + bin + " watch /etc/wmbatch/WATCH.yaml --check\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nStateDirectory=wmbatch\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nRestartPreventExitStatus=64 65 66\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("@WM_PREFIX@"), std::string::npos) << text;
  EXPECT_EQ(text.find("start over"), std::string::npos) << "stopped files resume";
  // The documentation it names is installed.
  const std::string doc = "Documentation=file://" + dir.file("share/doc/wmbatch/watch.md");
  EXPECT_NE(text.find(doc), std::string::npos) << text;
  EXPECT_TRUE(exists(dir.file("share/doc/wmbatch/watch.md")));
  EXPECT_TRUE(exists(dir.file("share/wmbatch/WATCH.example.yaml")));
  // The binary it starts is the installed one and runs (its --check's command line is valid).
  const CommandResult help = run_command({bin, "watch", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--check"), std::string::npos) << help.output;

  const std::string analyze = systemd_analyze();
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed: verify not run";
  const CommandResult verify = run_command({analyze, "verify", unit});
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_EQ(verify.output.find(unit), std::string::npos) << "no complaint: " << verify.output;
}

}  // namespace
}  // namespace wm::test
