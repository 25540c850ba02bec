// The farm journal (scheduler/journal.h): records survive reopening, fingerprints compare all
// fields, overlapping ranges are found, and several processes can write at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <iterator>

#include "scheduler/journal.h"
#include "src/base/error.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::sched {
namespace {

Fingerprint fp(const std::string& settings = "abc") {
  Fingerprint f;
  f.input = "/clips/a.mp4";
  f.size = 1234;
  f.mtime_ns = 5678;
  f.settings = settings;
  return f;
}

ChunkRecord chunk(int64_t first, int64_t last, const Fingerprint& f = fp()) {
  ChunkRecord r;
  r.first_frame = first;
  r.last_frame = last;
  r.fingerprint = f;
  r.segment = "seg-" + std::to_string(first) + ".mp4";
  r.frames = last < 0 ? 7 : last - first + 1;
  r.first_pts = first * 512;
  r.last_pts = (last < 0 ? first + 6 : last) * 512;
  r.segment_size = 100 + first;
  r.segment_mtime_ns = 42;
  r.seconds = 1.5;
  r.host = "node1";
  return r;
}

TEST(Journal, ChunksSurviveReopening) {
  test::TempDir dir("journal");
  const std::string path = dir.file("journal.sqlite");
  {
    Journal j(path);
    j.put_chunk(chunk(0, 9));
    j.put_chunk(chunk(10, 19));
  }
  Journal j(path, /*create=*/false);
  const auto all = j.chunks();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first_frame, 0);
  EXPECT_EQ(all[1].first_frame, 10);
  const auto one = j.chunk(10, 19);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->fingerprint, fp());
  EXPECT_EQ(one->segment, "seg-10.mp4");
  EXPECT_EQ(one->frames, 10);
  EXPECT_EQ(one->last_pts, 19 * 512);
  EXPECT_EQ(one->segment_size, 110);
  EXPECT_EQ(one->host, "node1");
  EXPECT_DOUBLE_EQ(one->seconds, 1.5);
  EXPECT_FALSE(j.chunk(10, 18));
}

TEST(Journal, MissingFileWithoutCreateThrows) {
  test::TempDir dir("journal");
  EXPECT_THROW(Journal(dir.file("none.sqlite"), false), OutputError);
  EXPECT_FALSE(test::exists(dir.file("none.sqlite")));
}

// A damaged journal (overwritten, or torn in the middle of its pages) is reported as damaged,
// with how to recover, and exits 65 (a retry cannot fix it), not 74.
TEST(Journal, DamagedFileIsReportedAsSuchWithTheWayOut) {
  test::TempDir dir("journal");
  const std::string overwritten = dir.file("a.wmfarm/journal.sqlite");
  const std::string torn = dir.file("b.wmfarm/journal.sqlite");
  std::filesystem::create_directories(dir.file("a.wmfarm"));
  std::filesystem::create_directories(dir.file("b.wmfarm"));
  test::write_text(overwritten, std::string(8192, 'x'));
  {
    Journal j(torn);
    for (int i = 0; i < 80; ++i) j.put_chunk(chunk(i * 10, i * 10 + 9));
  }
  std::string bytes = test::read_text(torn);
  for (size_t i = 4096; i < bytes.size(); i += 97) bytes[i] = char(0xA5);  // pages after the first
  test::write_text(torn, bytes);
  const auto open_fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator());
  };
  for (const std::string& path : {overwritten, torn}) {
    SCOPED_TRACE(path);
    const auto fds_before = open_fds();
    try {
      Journal j(path, false);
      j.chunks();
      j.put_chunk(chunk(5000, 5009));
      ADD_FAILURE() << "no error";
    } catch (const OutputError& e) {
      EXPECT_EQ(e.exit_code(), kExitDataErr) << e.what();
      const std::string message = e.what();
      EXPECT_NE(message.find(path + ": the farm journal is damaged"), std::string::npos) << message;
      EXPECT_NE(message.find("remove " + path.substr(0, path.rfind('/'))), std::string::npos)
          << message;
    }
    EXPECT_EQ(open_fds(), fds_before) << "the damaged journal's connection stays open";
  }
}

TEST(Journal, FingerprintComparesEveryField) {
  Fingerprint a = fp(), b = fp();
  EXPECT_EQ(a, b);
  b.mtime_ns++;
  EXPECT_NE(a, b);
  b = fp();
  b.size++;
  EXPECT_NE(a, b);
  b = fp("other");
  EXPECT_NE(a, b);
  b = fp();
  b.input = "/clips/b.mp4";
  EXPECT_NE(a, b);
}

TEST(Journal, PutChunkReplacesTheSameRangeAndClearsItsSlices) {
  test::TempDir dir("journal");
  Journal j(dir.file("j.sqlite"));
  j.put_slice({0, 9, 0, 4});
  j.put_slice({0, 9, 1, 8});
  j.put_slice({10, 19, 0, 4});
  const auto last = j.last_slice(0, 9);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->slice, 1);
  EXPECT_EQ(last->frames_done, 8);
  j.put_chunk(chunk(0, 9, fp("old")));
  EXPECT_FALSE(j.last_slice(0, 9));
  EXPECT_TRUE(j.last_slice(10, 19));
  j.put_chunk(chunk(0, 9, fp("new")));
  ASSERT_EQ(j.chunks().size(), 1u);
  EXPECT_EQ(j.chunk(0, 9)->fingerprint.settings, "new");
}

TEST(Journal, RemoveOverlappingFindsEveryIntersectingRange) {
  test::TempDir dir("journal");
  Journal j(dir.file("j.sqlite"));
  j.put_chunk(chunk(0, 9));
  j.put_chunk(chunk(10, 19));
  j.put_chunk(chunk(20, 29));
  j.put_chunk(chunk(30, -1));  // to the end
  // [15, 22] touches the second and third.
  auto removed = j.remove_overlapping(15, 22);
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0].first_frame + removed[1].first_frame, 30);
  EXPECT_EQ(j.chunks().size(), 2u);
  // An open range [5, end) reaches the open chunk and chunk 0.
  removed = j.remove_overlapping(5, -1);
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_TRUE(j.chunks().empty());
  // Disjoint: nothing.
  j.put_chunk(chunk(0, 9));
  EXPECT_TRUE(j.remove_overlapping(10, 12).empty());
  EXPECT_EQ(j.chunks().size(), 1u);
}

TEST(Journal, OutputAndPlanCache) {
  test::TempDir dir("journal");
  Journal j(dir.file("j.sqlite"));
  EXPECT_FALSE(j.output());
  OutputRecord out;
  out.fingerprint = fp();
  out.frames = 40;
  out.size = 999;
  out.mtime_ns = 77;
  j.put_output(out);
  ASSERT_TRUE(j.output());
  EXPECT_EQ(j.output()->frames, 40);
  EXPECT_EQ(j.output()->fingerprint, fp());
  j.clear_output();
  EXPECT_FALSE(j.output());
  EXPECT_FALSE(j.plan("k"));
  j.put_plan("k", "{\"frames\": 3}");
  j.put_plan("k", "{\"frames\": 4}");
  EXPECT_EQ(*j.plan("k"), "{\"frames\": 4}");
}

// Several processes writing at once: every row lands, none is lost to SQLITE_BUSY.
TEST(Journal, ConcurrentWritersFromProcesses) {
  test::TempDir dir("journal");
  const std::string path = dir.file("j.sqlite");
  { Journal create(path); }
  constexpr int kProcesses = 4, kRows = 25;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        Journal j(path);
        for (int i = 0; i < kRows; ++i) {
          const int64_t first = (p * kRows + i) * 10;
          j.put_chunk(chunk(first, first + 9));
          j.put_slice({first, first + 9, 0, 3});
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Journal j(path);
  EXPECT_EQ(j.chunks().size(), size_t(kProcesses * kRows));
}

TEST(Journal, StableHashIsFnv1a) {
  // FNV-1a 64 test vectors: the hash must not change between builds or hosts.
  EXPECT_EQ(stable_hash(""), "cbf29ce484222325");
  EXPECT_EQ(stable_hash("a"), "af63dc4c8601ec8c");
  EXPECT_NE(stable_hash("crf 18"), stable_hash("crf 19"));
}

TEST(Journal, StampFile) {
  test::TempDir dir("journal");
  EXPECT_FALSE(stamp_file(dir.file("none")));
  test::write_text(dir.file("f"), "12345");
  const auto s = stamp_file(dir.file("f"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->size, 5);
  EXPECT_GT(s->mtime_ns, 0);
}

}  // namespace
}  // namespace wm::sched
