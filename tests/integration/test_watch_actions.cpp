// The status page's actions (POST /api/retry, /api/pause, /api/resume; watch/status_server.h) on
// the real daemon over a real socket: who may act (peer, Host, Origin, token), a failed file
// retried until done with its source put back, and pause/resume kept across a restart.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/integration/test_watch_helpers.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

// A connection to 127.0.0.1:port from the address 127.0.0.2 (loopback too, but not 127.0.0.1):
// a peer the actions must refuse.
int connect_from_other_address(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(0x7f000002);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

nlohmann::json status_json(const WatchSetup& s) {
  const CommandResult r = run_command({wmbatch_path(), "status", s.watch_file(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

double paused_metric(int port) {
  const auto [code, text] = http_get(port, "/metrics");
  EXPECT_EQ(code, 200) << text;
  return parse_metrics(text).at("wmbatch_watch_paused");
}

// One line of text, ending with a newline.
void expect_one_line(const HttpAnswer& a) {
  EXPECT_FALSE(a.body.empty());
  EXPECT_EQ(count_of(a.body, "\n"), 1) << a.body;
}

TEST(WatchActions, RefusedWithoutTheTokenFromAnotherPeerHostOrOriginAndChangeNothing) {
  WatchSetup s("act-refuse");
  // 0.0.0.0: the page serves every address, and acts for 127.0.0.1 only.
  s.write_config("http: {listen: 0.0.0.0:0}\n");
  s.start();
  std::smatch m;
  const std::string log = s.log();
  ASSERT_TRUE(
      std::regex_search(log, m, std::regex("status page on http://0\\.0\\.0\\.0:([0-9]+)/")))
      << log;
  const int port = std::stoi(m[1]);
  const std::string token = s.token();
  ASSERT_EQ(token.size(), 32u) << log;
  EXPECT_EQ(count_of(log, token), 1) << "the token is printed once";
  const std::string host = "127.0.0.1:" + std::to_string(port);

  HttpAnswer a = http_post(port, "/api/pause", "");
  EXPECT_EQ(a.code, 403) << a.body;
  EXPECT_NE(a.body.find("token is needed"), std::string::npos) << a.body;
  expect_one_line(a);
  a = http_post(port, "/api/pause", "token=" + std::string(32, '0'));
  EXPECT_EQ(a.code, 403) << a.body;
  EXPECT_NE(a.body.find("wrong token"), std::string::npos) << a.body;
  expect_one_line(a);
  a = http_post(port, "/api/pause", "", "X-Wmbatch-Token: " + token.substr(1) + "\r\n");
  EXPECT_EQ(a.code, 403) << a.body;
  // The right token, from a page of another site (CSRF), or through another host name (DNS
  // rebinding), or from another address.
  a = http_post(port, "/api/pause", "token=" + token, "Origin: http://evil.example\r\n");
  EXPECT_EQ(a.code, 403) << a.body;
  EXPECT_NE(a.body.find("Origin"), std::string::npos) << a.body;
  expect_one_line(a);
  a = http_post(port, "/api/pause", "token=" + token, "Origin: null\r\n");
  EXPECT_EQ(a.code, 403) << a.body;
  a = http_post(port, "/api/pause", "token=" + token,
                "Host: evil.example:" + std::to_string(port) + "\r\n");
  EXPECT_EQ(a.code, 403) << a.body;
  EXPECT_NE(a.body.find("Host"), std::string::npos) << a.body;
  expect_one_line(a);
  const std::string body = "token=" + token;
  a = http_exchange_fd(connect_from_other_address(port),
                       "POST /api/pause HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(a.code, 403) << a.body;
  EXPECT_NE(a.body.find("from 127.0.0.1 only"), std::string::npos) << a.body;
  expect_one_line(a);
  // Nor does the page give the token away there.
  a = http_exchange_fd(connect_from_other_address(port),
                       "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(a.code, 200);
  EXPECT_EQ(a.body.find(token), std::string::npos) << a.body;
  EXPECT_EQ(a.body.find("/api/pause"), std::string::npos) << a.body;
  a = http_exchange_fd(connect_local(port),
                       "GET / HTTP/1.1\r\nHost: evil.example:" + std::to_string(port) +
                           "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(a.code, 200);
  EXPECT_EQ(a.body.find(token), std::string::npos) << a.body;
  // ... and never in the JSON or the metrics.
  EXPECT_EQ(http_get(port, "/api/status").second.find(token), std::string::npos);
  EXPECT_EQ(http_get(port, "/metrics").second.find(token), std::string::npos);
  // Served to 127.0.0.1 by its address, the page carries it, in its forms only.
  a = http_exchange_fd(connect_local(port),
                       "GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(a.code, 200);
  EXPECT_NE(a.body.find("name=\"token\" value=\"" + token + "\""), std::string::npos) << a.body;
  EXPECT_NE(a.head.find("X-Frame-Options: DENY"), std::string::npos) << a.head;

  // Wrong method, unknown file, a POST that is no action.
  a = http_exchange_fd(connect_local(port), "GET /api/pause HTTP/1.1\r\nHost: " + host +
                                                "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(a.code, 405) << a.body;
  EXPECT_NE(a.head.find("Allow: POST"), std::string::npos) << a.head;
  expect_one_line(a);
  a = http_post(port, "/metrics", "token=" + token);
  EXPECT_EQ(a.code, 405) << a.body;
  expect_one_line(a);
  a = http_post(port, "/api/retry", "token=" + token + "&id=4242");
  EXPECT_EQ(a.code, 404) << a.body;
  EXPECT_NE(a.body.find("#4242"), std::string::npos) << a.body;
  expect_one_line(a);
  a = http_post(port, "/api/retry", "token=" + token + "&id=x");
  EXPECT_EQ(a.code, 400) << a.body;
  a = http_post(port, "/api/retry", "token=" + token + "&id=1" + std::string(5000, ' '));
  EXPECT_EQ(a.code, 413) << a.body;

  // None of it paused the queue.
  EXPECT_EQ(status_json(s)["paused"], false);
  EXPECT_EQ(paused_metric(port), 0);
  EXPECT_EQ(s.log().find("paused"), std::string::npos) << s.log();
  // The right token, as a header (a script's way), does.
  a = http_post(port, "/api/pause", "", "X-Wmbatch-Token: " + token + "\r\n");
  EXPECT_EQ(a.code, 303) << a.body;
  EXPECT_NE(a.head.find("Location: /"), std::string::npos) << a.head;
  EXPECT_EQ(status_json(s)["paused"], true);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// Starts the daemon and has in/a.mp4 fail for good: its output is there already (on_exists:
// fail), so it fails with 73 and, with max_attempts 1, is given up (moved to failed/).
void start_with_a_failed_file(WatchSetup& s) {
  s.write_config("http: {listen: 127.0.0.1:0}\nretry: {max_attempts: 1}\n");
  make_small_clip(s.dir().file("clip.mp4"));
  write_text(s.out("a_x2.mp4"), "in the way");
  s.start();
  ASSERT_GT(s.http_port(), 0) << s.log();
  ASSERT_EQ(s.token().size(), 32u) << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("a.mp4"));
  ASSERT_TRUE(s.wait_until_disposed(1)) << s.log();
}

TEST(WatchActions, RetryPutsTheFailedFileBackAndItEndsDoneOnce) {
  WatchSetup s("act-retry");
  ASSERT_NO_FATAL_FAILURE(start_with_a_failed_file(s));
  const int port = s.http_port();
  const std::string token = s.token();
  auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].state, "failed");
  EXPECT_EQ(rows[0].exit_code, 73);
  const std::string failed = s.dir().file("failed/a.mp4");
  EXPECT_EQ(rows[0].source_now, failed);
  ASSERT_TRUE(exists(failed));
  ASSERT_TRUE(exists(failed + ".error.txt"));
  EXPECT_FALSE(exists(s.in("a.mp4")));
  const std::string id = std::to_string(rows[0].id);

  // What failed it goes; a retry then finds the source where it was taken from.
  stdfs::remove(s.out("a_x2.mp4"));
  HttpAnswer a = http_post(port, "/api/retry", "token=" + token + "&id=" + id);
  ASSERT_EQ(a.code, 303) << a.body;
  expect_one_line(a);
  EXPECT_NE(a.body.find("queued again"), std::string::npos) << a.body;
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  rows = s.queue();
  ASSERT_EQ(rows.size(), 1u) << "a retry is the same item, never a second one";
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].attempts, 2) << "attempts are kept";
  EXPECT_EQ(rows[0].failures, 1);
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 8);
  // The source went back where it was taken from (on_done: keep leaves it there), its note
  // went, and nothing is left in the failed folder.
  EXPECT_TRUE(exists(s.in("a.mp4")));
  EXPECT_FALSE(exists(failed));
  EXPECT_FALSE(exists(failed + ".error.txt"));
  EXPECT_TRUE(list_dir(s.dir().file("failed")).empty());
  // The job ran once: the first attempt stopped at the output in the way, before it started.
  EXPECT_EQ(count_of(s.all_logs(), "a.mp4: started"), 1) << s.log();
  EXPECT_NE(s.log().find("a.mp4: started (attempt 2)"), std::string::npos) << s.log();

  // A done file is not retried; the answer says why, and nothing changes.
  a = http_post(port, "/api/retry", "token=" + token + "&id=" + id);
  EXPECT_EQ(a.code, 409) << a.body;
  EXPECT_NE(a.body.find("not failed"), std::string::npos) << a.body;
  expect_one_line(a);
  EXPECT_EQ(s.queue()[0].attempts, 2);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchActions, RetryRefusesWhenAnotherFileTookTheFailedFilesPlace) {
  WatchSetup s("act-taken");
  ASSERT_NO_FATAL_FAILURE(start_with_a_failed_file(s));
  const int port = s.http_port();
  // Paused, so that what lands at a.mp4 now waits in the queue as a file of its own.
  ASSERT_EQ(http_post(port, "/api/pause", "token=" + s.token()).code, 303);
  make_small_clip(s.in("a.mp4"), 12);
  ASSERT_TRUE(wait_until([&] { return s.queue().size() == 2; })) << s.log();
  const HttpAnswer a = http_post(port, "/api/retry", "token=" + s.token() + "&id=1");
  EXPECT_EQ(a.code, 409) << a.body;
  EXPECT_NE(a.body.find("another file is there now"), std::string::npos) << a.body;
  expect_one_line(a);
  // Nothing lost: both files where they were, the failed one still failed.
  EXPECT_TRUE(exists(s.dir().file("failed/a.mp4")));
  EXPECT_EQ(probe(s.in("a.mp4")).video_frames, 12);
  EXPECT_EQ(s.queue()[0].state, "failed");
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchActions, PauseLetsTheRunningFileFinishHoldsTheNextAcrossARestartUntilResumed) {
  WatchSetup s("act-pause");
  s.write_config("http: {listen: 127.0.0.1:0}\nchunk_frames: 24\n");
  make_small_clip(s.dir().file("long.mp4"), 240, 320, 240);
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  int port = s.http_port();
  std::string token = s.token();
  ASSERT_GT(port, 0) << s.log();
  stdfs::copy_file(s.dir().file("long.mp4"), s.in("long.mp4"));
  ASSERT_TRUE(wait_until([&] { return s.log().find("long.mp4: started") != std::string::npos; }))
      << s.log();
  HttpAnswer a = http_post(port, "/api/pause", "token=" + token);
  ASSERT_EQ(a.code, 303) << a.body;
  expect_one_line(a);
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("next.mp4"));
  // The worker, free again once long.mp4 is done, finds next.mp4 due and leaves it: it says so.
  const std::string held = "paused: " + s.in("next.mp4") + " (and any file after it) waits";
  ASSERT_TRUE(wait_until([&] { return s.log().find(held) != std::string::npos; })) << s.log();
  auto rows = s.queue();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].state, "done") << "the running file finishes: " << rows[0].last_error;
  EXPECT_EQ(rows[0].interrupted, 0);
  EXPECT_EQ(rows[1].state, "queued");
  EXPECT_EQ(rows[1].attempts, 0);
  nlohmann::json st = status_json(s);
  EXPECT_EQ(st["paused"], true);
  EXPECT_EQ(st["counts"]["queued"], 1);
  EXPECT_EQ(paused_metric(port), 1);
  const CommandResult text = run_command({wmbatch_path(), "status", s.watch_file()});
  EXPECT_NE(text.output.find("paused: no new file starts"), std::string::npos) << text.output;

  // The pause is kept in the queue file: a restarted daemon holds the file still.
  EXPECT_EQ(s.stop(), 0) << s.log();
  s.start();
  port = s.http_port();
  token = s.token();
  ASSERT_TRUE(wait_until([&] { return s.log().find(held) != std::string::npos; })) << s.log();
  EXPECT_EQ(s.queue()[1].attempts, 0);
  EXPECT_EQ(paused_metric(port), 1);

  a = http_post(port, "/api/resume", "token=" + token);
  ASSERT_EQ(a.code, 303) << a.body;
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  rows = s.queue();
  EXPECT_EQ(rows[1].state, "done") << rows[1].last_error;
  EXPECT_EQ(rows[1].attempts, 1);
  EXPECT_EQ(probe(s.out("next_x2.mp4")).video_frames, 8);
  EXPECT_EQ(status_json(s)["paused"], false);
  EXPECT_EQ(paused_metric(port), 0);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// A queue written before the queue recorded each attempt's devices (no `devices` column) opens:
// the column is added, the old items keep their rows and show no device.
TEST(WatchActions, AQueueFromBeforeDevicesWereRecordedOpensAndKeepsItsItems) {
  WatchSetup s("act-old-queue");
  s.write_config();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(s.queue_file().c_str(), &db), SQLITE_OK);
  const char* old_schema = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta(key, value) VALUES('schema', '1');
CREATE TABLE items(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  input TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
  settings TEXT NOT NULL, folder TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'queued',
  attempts INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,
  interrupted INTEGER NOT NULL DEFAULT 0, exit_code INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '', output TEXT NOT NULL DEFAULT '',
  committing INTEGER NOT NULL DEFAULT 0, disposed INTEGER NOT NULL DEFAULT 0,
  source_now TEXT NOT NULL DEFAULT '',
  frames INTEGER NOT NULL DEFAULT 0, frames_total INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0,
  queued_at REAL NOT NULL, started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL DEFAULT 0,
  UNIQUE(input, size, mtime_ns, settings));
INSERT INTO items(input, size, mtime_ns, settings, folder, state, attempts, output, frames,
                  queued_at, finished_at, disposed, source_now)
  VALUES('/old/a.mp4', 1, 2, 'x', '/old', 'done', 1, '/old/a_x2.mp4', 8, 1.0, 2.0, 1, '/old/a.mp4');
)SQL";
  ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  const nlohmann::json st = status_json(s);
  ASSERT_EQ(st["history"].size(), 1u) << st.dump();
  EXPECT_EQ(st["history"][0]["input"], "/old/a.mp4");
  EXPECT_EQ(st["history"][0]["frames"], 8);
  EXPECT_FALSE(st["history"][0].contains("devices")) << st.dump();
  EXPECT_EQ(st["paused"], false);
  // The daemon runs on it and records where a new file ran.
  make_small_clip(s.in("b.mp4"));
  s.start();
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const nlohmann::json after = status_json(s);
  ASSERT_EQ(after["history"].size(), 2u) << after.dump();
  EXPECT_EQ(after["history"][0]["input"], s.in("b.mp4"));
  EXPECT_EQ(after["history"][0]["devices"], "cpu") << after.dump();
}

}  // namespace
}  // namespace wm::test
