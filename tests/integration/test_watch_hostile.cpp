// The watch-folder daemon under hostile or careless use (issue 25), end to end: the real
// `wmbatch watch` over real folders, links, sockets, resource limits and signals.
//  - a new version moved over a file while its old version runs is kept and processed
//  - a recursive entry's outputs keep the sub-folder ({subdir}); a template that drops it is
//    refused
//  - symbolic links planted at the daemon's temp and lock names are never followed
//  - symbolic links in a watched folder: taken only as follow_symlinks says
//  - a move of the source to a full file system leaves no partial file and the source in place
//  - one daemon per queue
//  - file names that are not UTF-8: processed, and served by every status form
//  - outputs that would come back as inputs (a_x2 → a_x2_x2, two entries feeding each other)
//  - slow and idle clients hold neither the status page nor the daemon's descriptors; running out
//    of descriptors is a failure that is retried
//  - '%' in real file names; two entries sharing a job through a YAML alias
//  - SIGHUP with the new status address taken keeps the old configuration and page whole
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "src/base/json_text.h"
#include "tests/integration/test_watch_helpers.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

// A WATCH.yaml: settle and poll short, `top` keys, then the entries (YAML text).
void write_watch(const WatchSetup& s, const std::string& top, const std::string& entries) {
  write_text(s.watch_file(), "settle_seconds: 0.3\npoll_seconds: 1\n" + top + "watch:\n" + entries);
}

// One entry watching `folder` with the lanczos ×2 job writing `output`; `extra` adds keys.
std::string entry(const std::string& folder, const std::string& output,
                  const std::string& extra = "", const std::string& job_extra = "") {
  return "  - folder: " + folder +
         "\n"
         "    job: {task: upscale, model: {kind: lanczos, scale: 2}, "
         "encode: {codec: libx264, preset: ultrafast, crf: 20}" +
         job_extra +
         "}\n"
         "    output: " +
         output + "\n" + extra;
}

// Copies `from` into the watched folder under `name` as uploaders do: a hidden name, then a rename.
void drop(const std::string& from, const std::string& folder, const std::string& name) {
  const std::string hidden = folder + "/.incoming-" + name;
  stdfs::copy_file(from, hidden, stdfs::copy_options::overwrite_existing);
  stdfs::rename(hidden, folder + "/" + name);
}

CommandResult check(const WatchSetup& s) {
  return run_command({wmbatch_path(), "watch", s.watch_file(), "--check"});
}

TEST(WatchHostile, ANewVersionMovedOverARunningFileIsKeptAndProcessedAsItsOwn) {
  WatchSetup s("new-version");
  write_watch(s, "chunk_frames: 0\n",
              entry("in", "out/{stem}_x2.mp4", "    on_done: delete\n", ", on_exists: overwrite"));
  // The old version runs long enough for the new one to arrive while it does (checked below).
  make_small_clip(s.dir().file("old.mp4"), 480, 320, 240);
  make_small_clip(s.dir().file("new.mp4"), 12);
  s.start();
  drop(s.dir().file("old.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(wait_until([&] { return s.log().find("a.mp4: started") != std::string::npos; }))
      << s.log();
  drop(s.dir().file("new.mp4"), s.dir().file("in"), "a.mp4");  // mv over it
  ASSERT_EQ(s.queue().at(0).state, "running")
      << "the old version finished before the new one came: make it longer";

  // The old version's disposal keeps the new version, which is not the file it processed.
  ASSERT_TRUE(wait_until([&] { return s.queue().at(0).disposed; })) << s.log();
  EXPECT_EQ(s.queue().at(0).state, "done");
  EXPECT_EQ(s.queue().at(0).source_now, s.in("a.mp4")) << "recorded as kept";
  // (Not whether a.mp4 exists now: the daemon may already have processed the 12-frame new
  // version and deleted it, as on_done says — a CI run saw that. The second row and its 12-frame
  // output below say it was not deleted unprocessed.)
  EXPECT_NE(s.log().find("a.mp4: replaced by a new version while it was processed"),
            std::string::npos)
      << s.log();

  // ... and processes it as a file of its own, then deletes it.
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  ASSERT_TRUE(wait_until([&] { return s.queue().at(1).disposed; })) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].state, "done") << rows[1].last_error;
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 12) << "the new version's output";
  EXPECT_FALSE(exists(s.in("a.mp4"))) << "on_done: delete, once processed";
}

TEST(WatchHostile, RecursiveOutputsKeepTheSubFolder) {
  WatchSetup s("subdir");
  // {stem} alone: cam1/clip.mp4 and cam2/clip.mp4 would write one output.
  write_watch(s, "", entry("in", "out/{stem}_x2.mp4", "    recursive: true\n"));
  const CommandResult refused = check(s);
  EXPECT_EQ(refused.exit_code, 65) << refused.output;
  EXPECT_NE(refused.output.find("WATCH.yaml:6: watch.output: a recursive entry's output must keep "
                                "the file's sub-folder"),
            std::string::npos)
      << refused.output;

  write_watch(s, "", entry("in", "out/{subdir}/{stem}_x2.mp4", "    recursive: true\n"));
  const CommandResult ok = check(s);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  for (const char* cam : {"cam1", "cam2"}) stdfs::create_directories(s.in(cam));
  make_small_clip(s.dir().file("8.mp4"), 8);
  make_small_clip(s.dir().file("12.mp4"), 12);
  make_small_clip(s.dir().file("4.mp4"), 4);
  s.start();
  drop(s.dir().file("8.mp4"), s.in("cam1"), "clip.mp4");
  drop(s.dir().file("12.mp4"), s.in("cam2"), "clip.mp4");
  drop(s.dir().file("4.mp4"), s.dir().file("in"), "clip.mp4");
  ASSERT_TRUE(s.wait_finished(3)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  for (const QueueRow& r : s.queue()) EXPECT_EQ(r.state, "done") << r.input << ": " << r.last_error;
  EXPECT_EQ(probe(s.out("cam1/clip_x2.mp4")).video_frames, 8);
  EXPECT_EQ(probe(s.out("cam2/clip_x2.mp4")).video_frames, 12);
  EXPECT_EQ(probe(s.out("clip_x2.mp4")).video_frames, 4) << "{subdir} is empty at the top";
}

TEST(WatchHostile, LinksPlantedAtTempAndLockNamesAreNeverFollowed) {
  WatchSetup s("planted");
  // No failed folder: the error note is written in the watched folder, where anyone may plant.
  // 10-frame chunks: a.mp4 (8 frames) runs whole, c.mp4 (20) in chunks and is assembled.
  write_watch(s, "chunk_frames: 10\n", entry("in", "out/{stem}_x2.mp4"));
  const std::string victim = s.dir().file("victim.txt");
  const std::string victim2 = s.dir().file("victim2.txt");
  const std::string victim3 = s.dir().file("victim3.txt");
  const std::string never = s.dir().file("never-created.txt");
  const std::string elsewhere = s.dir().file("elsewhere");
  write_text(victim, "precious\n");
  write_text(victim2, "precious too\n");
  write_text(victim3, "precious three\n");
  stdfs::create_directories(elsewhere);
  make_small_clip(s.dir().file("clip.mp4"));
  make_small_clip(s.dir().file("long.mp4"), 20);
  Background& daemon = s.start();
  const std::string pid = std::to_string(daemon.pid());
  // The error note's temp name; the outputs' temp names, a lock and a work folder (items 2, 3).
  stdfs::create_symlink(victim, s.in("bad.mp4.error.txt." + pid + ".partial"));
  stdfs::create_symlink(victim2, s.out(".wmwatch-2-a_x2.mp4." + pid + ".partial"));
  stdfs::create_symlink(never, s.out("..wmwatch-2-a_x2.mp4.wmlock"));
  stdfs::create_symlink(victim3, s.out(".wmwatch-3-c_x2.mp4." + pid + ".partial"));
  stdfs::create_symlink(elsewhere, s.out(".wmwatch-3-c_x2.mp4.wmfarm"));
  write_text(s.dir().file("bad.mp4"), std::string(4096, 'x'));
  drop(s.dir().file("bad.mp4"), s.dir().file("in"), "bad.mp4");
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  drop(s.dir().file("long.mp4"), s.dir().file("in"), "c.mp4");
  ASSERT_TRUE(s.wait_finished(3)) << s.log();
  ASSERT_TRUE(wait_until([&] { return s.queue().at(0).disposed; })) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();

  // (Compared, not printed: a video written through the link would fill the screen.)
  EXPECT_TRUE(read_text(victim) == "precious\n") << "the error note was written through a link";
  EXPECT_TRUE(read_text(victim2) == "precious too\n") << "the output was written through a link";
  EXPECT_TRUE(read_text(victim3) == "precious three\n") << "the assembly went through a link";
  EXPECT_FALSE(exists(never)) << "a lock file was created through a link";
  EXPECT_TRUE(list_dir(elsewhere).empty()) << "the chunks' work went through a link";
  const auto rows = s.queue();
  EXPECT_EQ(rows[0].state, "failed");
  EXPECT_EQ(rows[0].exit_code, 65);
  const std::string note = read_text(s.in("bad.mp4.error.txt"));
  EXPECT_NE(note.find("exit_code: 65"), std::string::npos) << note;
  EXPECT_EQ(rows[1].state, "done") << rows[1].last_error;
  EXPECT_EQ(rows[2].state, "done") << rows[2].last_error;
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 8);
  EXPECT_EQ(probe(s.out("c_x2.mp4")).video_frames, 20);
  EXPECT_EQ(read_chunks(s.queue_file())[rows[2].id].size(), 2u) << "c.mp4 ran in chunks";
  for (const char* name : {"a_x2.mp4", "c_x2.mp4"}) {
    struct stat st {};
    ASSERT_EQ(::lstat(s.out(name).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << name << " must be a file of its own";
  }
}

TEST(WatchHostile, SymbolicLinksAreTakenOnlyAsTheEntrySays) {
  WatchSetup s("links");
  // secret/ stands for a folder outside the watched ones (a user's 0700 home, say).
  const std::string secret = s.dir().file("secret");
  stdfs::create_directories(secret);
  make_small_clip(secret + "/s.mp4", 12);
  ::chmod(secret.c_str(), 0700);
  // a/ follows none, b/ links inside it, c/ any link.
  for (const char* f : {"a", "b", "c"}) {
    const std::string dir = s.dir().file(f);
    stdfs::create_directories(dir);
    make_small_clip(dir + "/real.mp4", 8);
    stdfs::create_symlink("real.mp4", dir + "/in-link.mp4");
    stdfs::create_symlink(secret + "/s.mp4", dir + "/out-link.mp4");
  }
  write_watch(s, "",
              entry("a", "out/a/{stem}_x2.mp4") +
                  entry("b", "out/b/{stem}_x2.mp4", "    follow_symlinks: true\n") +
                  entry("c", "out/c/{stem}_x2.mp4", "    follow_symlinks: outside\n"));
  s.start();
  ASSERT_TRUE(s.wait_finished(6)) << s.log();
  ASSERT_TRUE(wait_until([&] { return count_of(s.log(), ": not taken: a symbolic link") >= 3; }))
      << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  for (const QueueRow& r : s.queue()) EXPECT_EQ(r.state, "done") << r.input << ": " << r.last_error;
  EXPECT_EQ(s.queue().size(), 6u);
  EXPECT_EQ(probe(s.out("a/real_x2.mp4")).video_frames, 8);
  EXPECT_FALSE(exists(s.out("a/in-link_x2.mp4")));
  EXPECT_FALSE(exists(s.out("a/out-link_x2.mp4"))) << "the secret's content left its folder";
  EXPECT_EQ(probe(s.out("b/in-link_x2.mp4")).video_frames, 8);
  EXPECT_FALSE(exists(s.out("b/out-link_x2.mp4"))) << "a link outside its folder was taken";
  EXPECT_EQ(probe(s.out("c/out-link_x2.mp4")).video_frames, 12);
  const std::string log = s.log();
  EXPECT_NE(log.find(s.dir().file("a/in-link.mp4") + ": not taken: a symbolic link"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(s.dir().file("b/out-link.mp4") + ": not taken: a symbolic link to '" + secret +
                     "/s.mp4', outside"),
            std::string::npos)
      << log;
}

TEST(WatchHostile, AMoveToAFullFileSystemLeavesNoPartialFileAndKeepsTheSource) {
  WatchSetup s("full");
  // done/ on another file system: /dev/shm (tmpfs) where the temp folder is not one.
  char shm[] = "/dev/shm/wmbatch-done-XXXXXX";
  struct stat here {
  }, there{};
  const bool second_fs = ::access("/dev/shm", W_OK) == 0 && ::mkdtemp(shm) != nullptr &&
                         ::stat(s.dir().file("in").c_str(), &here) == 0 &&
                         ::stat(shm, &there) == 0 && here.st_dev != there.st_dev;
  if (!second_fs) {
    if (std::getenv("CI")) FAIL() << "no second file system (/dev/shm) for a cross-device move";
    GTEST_SKIP() << "no second file system (/dev/shm) for a cross-device move";
  }
  struct RemoveShm {
    std::string dir;
    ~RemoveShm() {
      std::error_code ec;
      stdfs::remove_all(dir, ec);
    }
  } remove_shm{shm};
  const std::string done = std::string(shm) + "/done";
  // A source larger than the file size limit, an output smaller: the move is what fails.
  ClipSpec big;
  big.width = 640;
  big.height = 480;
  big.frames = 12;
  big.codec = "rawvideo";  // 450 KiB a frame, where the output's are a few dozen
  big.container_ext = ".mkv";
  make_clip(s.dir().file("big.mkv"), big);
  const auto source_size = stdfs::file_size(s.dir().file("big.mkv"));
  write_watch(s, "",
              "  - folder: in\n"
              "    job: {task: upscale, model: {kind: lanczos, scale: 2}, "
              "encode: {codec: libx264, preset: ultrafast, crf: 45}}\n"
              "    output: out/{stem}_x2.mp4\n"
              "    patterns: '*.mkv'\n"
              "    on_done: move\n"
              "    done_folder: " +
                  done + "\n");
  // The file size limit stands for the full disk (writes past it fail with EFBIG).
  const std::string limit = std::to_string(source_size / 2);
  const std::string log = s.dir().file("log-full.txt");
  Background daemon({"prlimit", "--fsize=" + limit, wmbatch_path(), "watch", s.watch_file(),
                     "--log-level", "debug"},
                    log);
  ASSERT_TRUE(wait_until([&] {
    return read_text(log).find("watching ") != std::string::npos || daemon.exited();
  })) << read_text(log);
  drop(s.dir().file("big.mkv"), s.dir().file("in"), "a.mkv");
  ASSERT_TRUE(wait_until([&] {
    const auto rows = s.queue();
    return (!rows.empty() && rows[0].disposed) || daemon.exited();
  })) << read_text(log);
  ASSERT_FALSE(daemon.exited()) << read_text(log);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(), 0) << read_text(log);

  const auto rows = s.queue();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error << "\n" << read_text(log);
  ASSERT_LT(stdfs::file_size(s.out("a_x2.mp4")), source_size / 2) << "the output must fit";
  EXPECT_EQ(rows[0].source_now, s.in("a.mkv")) << "the source stays where it is";
  ASSERT_TRUE(exists(s.in("a.mkv")));
  EXPECT_EQ(stdfs::file_size(s.in("a.mkv")), source_size) << "the source was changed";
  EXPECT_FALSE(exists(done + "/a.mkv")) << "a truncated file under the final name";
  if (exists(done)) {
    EXPECT_TRUE(list_dir(done).empty()) << "a temp file left behind";
  }
  EXPECT_NE(read_text(log).find("a.mkv: cannot copy to " + done + "/a.mkv: write"),
            std::string::npos)
      << read_text(log);
}

TEST(WatchHostile, ASecondDaemonOnTheSameQueueExitsWithOneClearLine) {
  WatchSetup s("second");
  s.write_config();
  Background& first = s.start();
  const std::string log = s.dir().file("log-second.txt");
  Background second({wmbatch_path(), "watch", s.watch_file()}, log);
  ASSERT_TRUE(wait_until([&] { return second.exited(); })) << "the second daemon keeps running\n"
                                                           << read_text(log);
  EXPECT_EQ(second.wait(), 69);
  const std::string out = read_text(log);
  EXPECT_EQ(out, "wmbatch: " + s.queue_file() + ": another wmbatch watch (pid " +
                     std::to_string(first.pid()) +
                     ") is running on this queue; one daemon per queue (stop it first, or give "
                     "this WATCH.yaml a queue: of its own)\n");
  // The first one goes on, and once it stopped, a new daemon takes the queue.
  make_small_clip(s.dir().file("clip.mp4"));
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  s.start();
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_EQ(s.queue().at(0).state, "done");
}

TEST(WatchHostile, FileNamesThatAreNotUtf8AreProcessedAndServed) {
  WatchSetup s("latin1");
  // 4-frame chunks: the 8-frame clip is cut, run and assembled (the farm journal's records
  // carry its name too).
  s.write_config("http: {listen: 127.0.0.1:0}\nchunk_frames: 4\n");
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  const std::string good = "caf\xe9";
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), good + ".mp4");
  write_text(s.dir().file("bad.mp4"), "not a video");
  drop(s.dir().file("bad.mp4"), s.dir().file("in"), "bad\xff.mp4");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  const auto rows = s.queue();
  for (const QueueRow& r : rows) {
    if (r.input == s.in(good + ".mp4")) {
      EXPECT_EQ(r.state, "done") << r.last_error;
      EXPECT_EQ(r.attempts, 1) << r.last_error;
      EXPECT_EQ(read_chunks(s.queue_file())[r.id].size(), 2u) << "it ran in chunks";
    } else {
      EXPECT_EQ(r.state, "failed");
      EXPECT_EQ(r.exit_code, 65) << r.last_error;
    }
  }
  EXPECT_EQ(probe(s.out(good + "_x2.mp4")).video_frames, 8);

  const int port = s.http_port();
  const auto [code, body] = http_get(port, "/api/status");
  ASSERT_EQ(code, 200) << body;
  const nlohmann::json status = json_parse(body);
  std::set<std::string> inputs;
  for (const auto& h : status["history"]) inputs.insert(h["input"].get<std::string>());
  EXPECT_TRUE(inputs.count(s.in(good + ".mp4"))) << body << " (the bytes come back exactly)";
  EXPECT_TRUE(inputs.count(s.in("bad\xff.mp4"))) << body;
  const auto [hcode, html] = http_get(port, "/");
  ASSERT_EQ(hcode, 200) << html;
  EXPECT_NE(html.find("caf\\xe9.mp4"), std::string::npos) << html;
  EXPECT_NE(html.find("bad\\xff.mp4"), std::string::npos) << html;
  EXPECT_EQ(http_get(port, "/metrics").first, 200);

  const CommandResult json = run_command({wmbatch_path(), "status", s.watch_file(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(json_parse(json.output)["counts"]["done"], 1) << json.output;
  const CommandResult text = run_command({wmbatch_path(), "status", s.watch_file()});
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("bad\\xff.mp4"), std::string::npos) << text.output;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchHostile, OutputsThatWouldComeBackAsInputsAreRefused) {
  WatchSetup s("loops");
  for (const char* f : {"a", "b", "c"}) stdfs::create_directories(s.dir().file(f));
  // The recursive folder takes its own outputs: a_x2 → a_x2_x2 → ...
  write_watch(s, "", entry("in", "\"{dir}/up/{stem}_x2{ext}\"", "    recursive: true\n"));
  CommandResult r = check(s);
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("WATCH.yaml:6: watch.output: its outputs would be taken again by this "
                          "entry ('" +
                          s.in("up/x_x2.mp4") + "'"),
            std::string::npos)
      << r.output;
  // The daemon refuses it at start too.
  const CommandResult start = run_command({wmbatch_path(), "watch", s.watch_file()});
  EXPECT_EQ(start.exit_code, 65) << start.output;

  // Two entries feeding each other.
  write_watch(s, "", entry("a", "b/{stem}_x2.mp4") + entry("b", "a/{stem}_y.mp4"));
  r = check(s);
  EXPECT_EQ(r.exit_code, 65) << r.output;
  EXPECT_NE(r.output.find("WATCH.yaml:6: watch.output: its outputs go to the folder of the entry "
                          "at line 7 ('" +
                          s.dir().file("b/x_x2.mp4") + "'), whose outputs come back here"),
            std::string::npos)
      << r.output;
  // A chain that ends is fine: a → b → c.
  write_watch(s, "", entry("a", "b/{stem}_x2.mp4") + entry("b", "c/{stem}_y.mp4"));
  r = check(s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A client that sends a request head one byte at a time, a byte every `pause`, until stopped;
// `closed` once the server closed the connection.
class SlowClient {
 public:
  SlowClient(int port, std::chrono::milliseconds pause) : fd_(connect_local(port)) {
    thread_ = std::thread([this, pause] {
      const std::string head = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";
      for (size_t i = 0; !stop_.load(); ++i) {
        const char c = i < head.size() ? head[i] : 'x';
        if (::send(fd_, &c, 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(pause);
      }
    });
  }
  ~SlowClient() {
    stop_ = true;
    thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }
  // True once the server closed the connection (non-blocking).
  bool closed() const {
    char buf[256];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(WatchHostile, SlowClientsHoldNeitherTheStatusPageNorAThread) {
  WatchSetup s("slowloris");
  s.write_config("http: {listen: 127.0.0.1:0}\n");
  s.start();
  const int port = s.http_port();
  ASSERT_GT(port, 0) << s.log();
  std::vector<std::unique_ptr<SlowClient>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<SlowClient>(port, std::chrono::milliseconds(1000)));
    ASSERT_TRUE(slow.back()->connected());
  }
  // While they trickle, the page answers.
  for (const char* page : {"/metrics", "/api/status", "/"}) {
    const auto [code, body] = http_get(port, page);
    EXPECT_EQ(code, 200) << page << ": " << body;
  }
  // And the server closes each of them once its head is overdue.
  ASSERT_TRUE(wait_until([&] {
    for (const auto& c : slow) {
      if (!c->closed()) return false;
    }
    return true;
  })) << "a slow client is still connected";
  EXPECT_EQ(http_get(port, "/metrics").first, 200);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

// Idle connections, opened and kept: a flood.
std::vector<int> open_idle(int port, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = connect_local(port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  return fds;
}

TEST(WatchHostile, AFloodOfIdleConnectionsStarvesNeitherTheJobsNorThePage) {
  WatchSetup s("flood");
  s.write_config("http: {listen: 127.0.0.1:0}\n");
  // 256 descriptors for the whole daemon, and more idle connections than that.
  const std::string log = s.dir().file("log-flood.txt");
  Background daemon(
      {"prlimit", "--nofile=256", wmbatch_path(), "watch", s.watch_file(), "--log-level", "debug"},
      log);
  ASSERT_TRUE(wait_until([&] {
    return read_text(log).find("status page on") != std::string::npos || daemon.exited();
  })) << read_text(log);
  std::smatch m;
  const std::string text = read_text(log);
  ASSERT_TRUE(std::regex_search(text, m, std::regex("127\\.0\\.0\\.1:([0-9]+)/"))) << text;
  const int port = std::stoi(m[1]);
  const std::vector<int> idle = open_idle(port, 300);
  EXPECT_EQ(idle.size(), 300u);
  EXPECT_EQ(http_get(port, "/metrics").first, 200) << read_text(log);
  make_small_clip(s.dir().file("clip.mp4"));
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(s.wait_finished(1)) << read_text(log);
  const auto rows = s.queue();
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(rows[0].failures, 0) << rows[0].last_error;
  EXPECT_EQ(http_get(port, "/api/status").first, 200);
  for (const int fd : idle) ::close(fd);
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(), 0) << read_text(log);
}

// The lowest descriptor number a process does not hold: as its limit, no new one can be opened.
int lowest_free_descriptor(pid_t pid) {
  std::set<int> held;
  for (const std::string& fd : list_dir("/proc/" + std::to_string(pid) + "/fd")) {
    held.insert(std::stoi(fd));
  }
  int n = 0;
  while (held.count(n)) ++n;
  return n;
}

TEST(WatchHostile, RunningOutOfDescriptorsIsAFailureThatIsRetried) {
  WatchSetup s("emfile");
  s.write_config("retry: {max_attempts: 5, backoff_seconds: 1}\n");
  make_small_clip(s.dir().file("clip.mp4"));
  Background& daemon = s.start();
  const std::string pid = std::to_string(daemon.pid());
  // No descriptor left to open anything new with (those open stay usable).
  const std::string none = std::to_string(lowest_free_descriptor(daemon.pid()));
  ASSERT_EQ(run_command({"prlimit", "--pid", pid, "--nofile=" + none + ":"}).exit_code, 0);
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(wait_until([&] {
    const auto rows = s.queue();
    return !rows.empty() && (rows[0].failures >= 1 || rows[0].state == "done");
  })) << s.log();
  {
    const auto rows = s.queue();
    ASSERT_GE(rows[0].failures, 1) << "no descriptor was missing: " << s.log();
    EXPECT_NE(rows[0].state, "failed") << "given up: " << rows[0].last_error;
    EXPECT_EQ(rows[0].exit_code, 75) << rows[0].last_error;
    EXPECT_NE(rows[0].last_error.find("a.mp4"), std::string::npos) << rows[0].last_error;
    EXPECT_TRUE(exists(s.in("a.mp4"))) << "moved away though it will be retried";
  }
  ASSERT_EQ(run_command({"prlimit", "--pid", pid, "--nofile=1024:"}).exit_code, 0);
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  const auto rows = s.queue();
  EXPECT_EQ(rows[0].state, "done") << rows[0].last_error;
  EXPECT_EQ(probe(s.out("a_x2.mp4")).video_frames, 8);
}

TEST(WatchHostile, PercentInRealFileNamesIsNotASequencePattern) {
  WatchSetup s("percent");
  s.write_config();
  make_small_clip(s.dir().file("8.mp4"), 8);
  make_small_clip(s.dir().file("12.mp4"), 12);
  s.start();
  drop(s.dir().file("8.mp4"), s.dir().file("in"), "pct%d.mp4");
  drop(s.dir().file("12.mp4"), s.dir().file("in"), "pct%03d.mp4");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  for (const QueueRow& r : s.queue()) EXPECT_EQ(r.state, "done") << r.input << ": " << r.last_error;
  EXPECT_EQ(probe(s.out("pct%d_x2.mp4")).video_frames, 8);
  EXPECT_EQ(probe(s.out("pct%03d_x2.mp4")).video_frames, 12);
}

TEST(WatchHostile, TwoEntriesMayShareAJobThroughAYamlAlias) {
  WatchSetup s("alias");
  stdfs::create_directories(s.dir().file("in2"));
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\n"
             "watch:\n"
             "  - folder: in\n"
             "    job: &up {task: upscale, model: {kind: lanczos, scale: 2}}\n"
             "    output: out/{stem}_x2.mp4\n"
             "  - folder: in2\n"
             "    job: *up\n"
             "    output: out/{stem}_y2.mp4\n");
  const CommandResult r = check(s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  drop(s.dir().file("clip.mp4"), s.dir().file("in2"), "b.mp4");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  EXPECT_EQ(s.stop(), 0) << s.log();
  EXPECT_EQ(probe(s.out("a_x2.mp4")).width, 128);
  EXPECT_EQ(probe(s.out("b_y2.mp4")).width, 128);
}

// A listening socket on 127.0.0.1, any free port; closed on destruction.
struct TakenPort {
  int fd = -1;
  int port = 0;
  TakenPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd, 4) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0) {
      port = ntohs(addr.sin_port);
    }
  }
  ~TakenPort() { ::close(fd); }
};

TEST(WatchHostile, SighupToATakenAddressKeepsTheOldConfigurationAndPage) {
  WatchSetup s("hup-port");
  s.write_config("http: {listen: 127.0.0.1:0}\n");
  make_small_clip(s.dir().file("clip.mp4"));
  Background& daemon = s.start();
  const int old_port = s.http_port();
  ASSERT_GT(old_port, 0) << s.log();
  auto taken = std::make_unique<TakenPort>();
  ASSERT_GT(taken->port, 0);
  const std::string moved = "http: {listen: 127.0.0.1:" + std::to_string(taken->port) + "}\n";
  s.write_config(moved);
  std::string config = read_text(s.watch_file());
  config.replace(config.find("{stem}_x2"), 9, "{stem}_v2");
  write_text(s.watch_file(), config);
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_until([&] { return s.log().find("reload failed") != std::string::npos; }))
      << s.log();
  EXPECT_NE(s.log().find("reload failed; keeping the running configuration: status page: cannot "
                         "listen on 127.0.0.1:" +
                         std::to_string(taken->port)),
            std::string::npos)
      << s.log();
  // The old page and the old template, whole.
  EXPECT_EQ(http_get(old_port, "/metrics").first, 200) << "the status page is gone";
  drop(s.dir().file("clip.mp4"), s.dir().file("in"), "a.mp4");
  ASSERT_TRUE(s.wait_finished(1)) << s.log();
  EXPECT_TRUE(exists(s.out("a_x2.mp4"))) << "the new template took effect";
  EXPECT_FALSE(exists(s.out("a_v2.mp4")));

  // Once the address is free, the same file is taken as a whole: the page moves.
  const int new_port = taken->port;
  taken.reset();
  daemon.signal(SIGHUP);
  ASSERT_TRUE(wait_until([&] { return s.log().find("reloaded ") != std::string::npos; }))
      << s.log();
  EXPECT_EQ(http_get(new_port, "/metrics").first, 200) << s.log();
  EXPECT_EQ(http_get(old_port, "/metrics").first, -1) << "the old page still answers";
  EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace wm::test
