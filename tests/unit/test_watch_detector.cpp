// The watch daemon's detector (watch/detector.h) on real folders with real inotify: what it
// promises the daemon's loop.
//  - order: inotify's arrival order; at a rescan, modification time then name
//  - settling: a file changing in size or mtime is not ready; it is ready only after it held
//    still for settle_seconds, and only while no other process holds it open for writing
//  - exactly once: a version the queue knows is never a candidate again; a new version is
//  - never taken: hidden and partial names, the daemon's notes, links not followed; a rename
//    from a partial name into place is taken; a file that vanishes is dropped
//  - recursive entries: a folder made after the start is watched and its files taken
// settle_seconds is 0 where settling is not the point (then a file is ready at the first look),
// so no test waits on the clock except the one about settling, which only measures a lower bound.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/support/media.h"
#include "tests/support/run.h"
#include "watch/detector.h"
#include "watch/watch_spec.h"

namespace wm::watch {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A guard against a hang, not a speed requirement.
constexpr double kPatienceSeconds = 300;

// A watched folder in/ with its WATCH.yaml, and the set of versions "the queue" knows.
class Folder {
 public:
  explicit Folder(const std::string& tag, double settle_seconds = 0,
                  const std::string& entry_keys = "")
      : dir_("detector-" + tag) {
    stdfs::create_directories(dir_.file("in"));
    stdfs::create_directories(dir_.file("out"));
    test::write_text(dir_.file("WATCH.yaml"),
                     "settle_seconds: " + std::to_string(settle_seconds) +
                         "\n"
                         "watch:\n"
                         "  - folder: in\n"
                         "    job: {task: upscale, model: {kind: lanczos, scale: 2}}\n"
                         "    output: out/{subdir}/{stem}_x2.mp4\n" +
                         entry_keys);
    spec_ = load_watch_file(dir_.file("WATCH.yaml"));
  }
  std::string in(const std::string& name) const { return spec_.entries.at(0).folder + "/" + name; }
  std::string file(const std::string& name) const { return dir_.file(name); }
  const WatchSpec& spec() const { return spec_; }
  // A detector whose "queue" is known_.
  std::unique_ptr<Detector> detector() {
    return std::make_unique<Detector>(
        spec_, [this](const std::string& path, int64_t size, int64_t mtime_ns, const WatchEntry&) {
          return known_.count({path, size, mtime_ns}) > 0;
        });
  }
  void know(const ReadyFile& f) { known_.insert({f.path, f.size, f.mtime_ns}); }

 private:
  test::TempDir dir_;
  WatchSpec spec_;
  std::set<std::tuple<std::string, int64_t, int64_t>> known_;
};

std::vector<std::string> paths(const std::vector<ReadyFile>& files) {
  std::vector<std::string> out;
  for (const ReadyFile& f : files) out.push_back(f.path);
  return out;
}

void append(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  ::close(fd);
}

void set_mtime(const std::string& path, int64_t seconds, int64_t nanoseconds = 0) {
  const timespec times[2] = {{seconds, nanoseconds}, {seconds, nanoseconds}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Calls take_ready() until it returns something (or the patience runs out).
std::vector<ReadyFile> take_when_ready(Detector& d) {
  const auto start = Clock::now();
  for (;;) {
    d.read_events();
    auto ready = d.take_ready();
    if (!ready.empty()) return ready;
    if (std::chrono::duration<double>(Clock::now() - start).count() > kPatienceSeconds) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(WatchDetector, FilesAreReadyInTheOrderInotifyReportedThem) {
  Folder f("order");
  auto d = f.detector();
  ASSERT_GE(d->fd(), 0) << "inotify";
  // Arrival order is not name order.
  const std::vector<std::string> arrival = {f.in("c.mp4"), f.in("a.mp4"), f.in("b.mp4")};
  for (const auto& p : arrival) test::write_text(p, "video " + p);
  d->read_events();  // inotify's events are queued when close() returns
  const auto ready = d->take_ready();
  EXPECT_EQ(paths(ready), arrival);
  for (const ReadyFile& r : ready) {
    EXPECT_EQ(r.entry, &f.spec().entries.at(0));
    EXPECT_EQ(r.size, int64_t(("video " + r.path).size()));
    EXPECT_EQ(r.mtime_ns, mtime_ns(r.path));
  }
  EXPECT_EQ(d->candidates(), 0u) << "taken files leave the candidates";
  EXPECT_TRUE(d->take_ready().empty());
}

TEST(WatchDetector, ARescanTakesFilesByModificationTimeThenName) {
  Folder f("rescan");
  for (const char* name : {"a.mp4", "b.mp4", "c.mp4", "d.mkv"}) test::write_text(f.in(name), name);
  set_mtime(f.in("b.mp4"), 1000);
  set_mtime(f.in("c.mp4"), 2000);
  set_mtime(f.in("a.mp4"), 2000);  // same time as c: name order
  set_mtime(f.in("d.mkv"), 3000);
  auto d = f.detector();
  d->rescan();
  d->rescan();  // a second walk adds nothing twice
  EXPECT_EQ(d->candidates(), 4u);
  EXPECT_EQ(paths(d->take_ready()),
            (std::vector<std::string>{f.in("b.mp4"), f.in("a.mp4"), f.in("c.mp4"), f.in("d.mkv")}));
}

TEST(WatchDetector, IgnoredNamesAreNeverCandidatesARenameIntoPlaceIsTaken) {
  Folder f("names");
  auto d = f.detector();
  for (const char* name : {".hidden.mp4", "x.mp4.part", "y.mp4.tmp", "z.mp4.partial",
                           "a.mp4.error.txt", "notes.txt"}) {
    test::write_text(f.in(name), name);
  }
  d->read_events();
  d->rescan();
  EXPECT_EQ(d->candidates(), 0u);
  EXPECT_TRUE(d->take_ready().empty());
  // Copied under a partial name, then renamed into place (IN_MOVED_TO).
  stdfs::rename(f.in("x.mp4.part"), f.in("x.mp4"));
  d->read_events();
  EXPECT_EQ(paths(d->take_ready()), (std::vector<std::string>{f.in("x.mp4")}));
}

TEST(WatchDetector, AKnownVersionIsNeverACandidateAgainANewVersionIs) {
  Folder f("versions");
  auto d = f.detector();
  test::write_text(f.in("a.mp4"), "version one");
  d->read_events();
  const auto first = d->take_ready();
  ASSERT_EQ(first.size(), 1u);
  f.know(first[0]);  // queued
  // Seen again by rescans and by another event on the same version: not a candidate.
  d->rescan();
  ::close(::open(f.in("a.mp4").c_str(), O_WRONLY));  // IN_CLOSE_WRITE, nothing changed
  d->read_events();
  EXPECT_EQ(d->candidates(), 0u);
  EXPECT_TRUE(d->take_ready().empty());
  // A new version (other size and mtime) is a new candidate, with its own fingerprint.
  test::write_text(f.in("a.mp4"), "version two, longer");
  set_mtime(f.in("a.mp4"), 4000);
  d->read_events();
  const auto second = d->take_ready();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].size, int64_t(std::string("version two, longer").size()));
  EXPECT_EQ(second[0].mtime_ns, int64_t(4000) * 1000000000);
  // A version known while it settled is dropped when it settles.
  f.know(second[0]);
  test::write_text(f.in("b.mp4"), "b");
  d->read_events();
  EXPECT_EQ(d->candidates(), 1u);
  f.know({f.in("b.mp4"), nullptr, 1, mtime_ns(f.in("b.mp4"))});
  EXPECT_TRUE(d->take_ready().empty());
  EXPECT_EQ(d->candidates(), 0u);
}

// A file still growing or touched is not ready; once it holds still, it is ready after
// settle_seconds and not before (measured from the last look that saw it change).
TEST(WatchDetector, AGrowingFileIsReadyOnlyAfterItHeldStillForSettleSeconds) {
  constexpr double kSettle = 0.3;
  Folder f("settle", kSettle);
  auto d = f.detector();
  const std::string p = f.in("grow.mp4");
  test::write_text(p, std::string(100, 'a'));
  d->read_events();
  EXPECT_EQ(d->candidates(), 1u);
  // Whenever take_ready() sees a new size or mtime, the file starts settling again: not ready in
  // that call, however long ago it was first seen.
  append(p, std::string(50, 'b'));
  EXPECT_TRUE(d->take_ready().empty()) << "grew";
  set_mtime(p, 5000);  // same size, new mtime (a copy tool setting times)
  const auto last_change_seen = Clock::now();
  EXPECT_TRUE(d->take_ready().empty()) << "touched";
  const auto ready = take_when_ready(*d);
  const auto ready_at = Clock::now();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].size, 150);
  EXPECT_EQ(ready[0].mtime_ns, int64_t(5000) * 1000000000);
  EXPECT_GE(std::chrono::duration<double>(ready_at - last_change_seen).count(), kSettle)
      << "ready before it held still for settle_seconds";
}

// Another process holding the file open for writing keeps it from being ready, settled or not.
TEST(WatchDetector, AFileOpenForWritingElsewhereWaitsUntilClosed) {
  Folder f("open");
  auto d = f.detector();
  const std::string p = f.in("held.mp4");
  test::write_text(p, "first part");
  int opened[2], release[2];
  ASSERT_EQ(::pipe(opened), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(opened[0]);
    ::close(release[1]);
    const int fd = ::open(p.c_str(), O_WRONLY | O_APPEND);
    const char c = fd >= 0 ? 1 : 0;
    if (::write(opened[1], &c, 1) != 1) ::_exit(2);
    char x;
    while (::read(release[0], &x, 1) > 0) {
    }
    ::_exit(fd >= 0 ? 0 : 1);
  }
  ::close(opened[1]);
  ::close(release[0]);
  char c = 0;
  ASSERT_EQ(::read(opened[0], &c, 1), 1);
  ASSERT_EQ(c, 1) << "the child could not open the file";
  d->read_events();
  // Settled (settle_seconds 0) but held: not ready, however often asked.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(d->take_ready().empty()) << "taken while open for writing";
    EXPECT_EQ(d->candidates(), 1u);
  }
  ::close(release[1]);  // the child closes the file and exits
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(opened[0]);
  EXPECT_EQ(paths(d->take_ready()), (std::vector<std::string>{p}));
}

TEST(WatchDetector, AFileThatVanishesWhileSettlingIsDropped) {
  Folder f("vanish", 3600);  // never settles within the test
  auto d = f.detector();
  test::write_text(f.in("gone.mp4"), "x");
  test::write_text(f.in("stays.mp4"), "y");
  d->read_events();
  EXPECT_EQ(d->candidates(), 2u);
  stdfs::remove(f.in("gone.mp4"));
  EXPECT_TRUE(d->take_ready().empty());
  EXPECT_EQ(d->candidates(), 1u);
}

TEST(WatchDetector, ARecursiveEntryTakesFilesOfFoldersMadeAfterItStarted) {
  Folder f("recursive", 0, "    recursive: true\n    failed_folder: in/failed\n");
  stdfs::create_directories(f.in("failed"));
  stdfs::create_directories(f.in(".cache"));
  auto d = f.detector();
  // A folder and files in it before the detector reads the folder's event (found by the scan
  // of the new folder), then files after (found by the new folders' own watches). No rescan.
  stdfs::create_directories(f.in("cam1/day1"));
  test::write_text(f.in("cam1/a.mp4"), "a");
  test::write_text(f.in("cam1/day1/b.mp4"), "b");
  d->read_events();
  test::write_text(f.in("cam1/c.mp4"), "c");
  test::write_text(f.in("cam1/day1/d.mp4"), "d");
  d->read_events();
  const auto ready = d->take_ready();
  for (const ReadyFile& r : ready) f.know(r);  // queued
  std::vector<std::string> got = paths(ready);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{f.in("cam1/a.mp4"), f.in("cam1/c.mp4"),
                                           f.in("cam1/day1/b.mp4"), f.in("cam1/day1/d.mp4")}));
  // Never, by events or rescans: files in hidden folders and in the failed folder.
  test::write_text(f.in(".cache/x.mp4"), "x");
  test::write_text(f.in("failed/y.mp4"), "y");
  d->read_events();
  d->rescan();
  EXPECT_EQ(d->candidates(), 0u);
  EXPECT_TRUE(d->take_ready().empty());
}

TEST(WatchDetector, ASymbolicLinkIsNotTakenUnlessTheEntryFollowsLinks) {
  for (const bool follow : {false, true}) {
    SCOPED_TRACE(follow);
    Folder f("links", 0, follow ? "    follow_symlinks: true\n" : "");
    // The link's target has a hidden name: only the link can be taken.
    test::write_text(f.in(".real.mp4"), "r");
    stdfs::create_symlink(".real.mp4", f.in("link.mp4"));
    auto d = f.detector();
    d->rescan();
    const auto ready = d->take_ready();
    if (follow) {
      EXPECT_EQ(paths(ready), (std::vector<std::string>{f.in("link.mp4")}));
    } else {
      EXPECT_TRUE(ready.empty());
      EXPECT_EQ(d->candidates(), 0u);
    }
  }
}

}  // namespace
}  // namespace wm::watch
