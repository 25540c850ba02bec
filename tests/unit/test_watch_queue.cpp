// The watch queue (watch/queue.h) on a real SQLite file: what it promises the daemon.
//  - exactly once: a fingerprint (path, size, mtime, settings) is queued once, in any state; a
//    new version is a new item
//  - order: claim takes the oldest due item (arrival order), a back-off delays only its own item
//  - pause: nothing is claimed, the held item is named, and the flag survives reopening
//  - crash safety: a process killed (SIGKILL) between or inside transactions leaves a queue that
//    opens, holds every enqueue that returned, and whose running items recover() queues again
//  - concurrency: connections of two processes claiming at once take each item once
//  - the state machine's counters: attempts, failures, interruptions, chunks, requeue of a failure
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "tests/support/media.h"
#include "tests/support/run.h"
#include "watch/queue.h"

namespace wm::watch {
namespace {

constexpr double kNow = 1.8e9;  // a fixed "now" for claim(): due times are compared to it

bool add(Queue& q, const std::string& input, int64_t size = 100, int64_t mtime_ns = 7,
         const std::string& settings = "s1") {
  return q.enqueue(input, size, mtime_ns, settings, "/in");
}

// A queue file holding `inputs`, queued in that order (the Queue closed again).
void seed_queue(const std::string& path, const std::vector<std::string>& inputs) {
  Queue q(path);
  for (const std::string& input : inputs) ASSERT_TRUE(add(q, input)) << input;
}

// PRAGMA integrity_check of a database file, through a connection of its own.
std::string integrity(const std::string& path) {
  sqlite3* db = nullptr;
  std::string out = "cannot open";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, nullptr) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return out;
}

// Exit status of a forked child, 128 + signal when killed.
int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(WatchQueue, AFingerprintIsQueuedOnceInAnyStateANewVersionIsANewItem) {
  test::TempDir dir("queue-once");
  Queue q(dir.file("q.sqlite"));
  EXPECT_TRUE(add(q, "/in/a.mp4"));
  EXPECT_FALSE(add(q, "/in/a.mp4")) << "the same version again";
  EXPECT_TRUE(q.known("/in/a.mp4", 100, 7, "s1"));
  // Every part of the fingerprint makes another version.
  EXPECT_FALSE(q.known("/in/a.mp4", 101, 7, "s1"));
  EXPECT_FALSE(q.known("/in/a.mp4", 100, 8, "s1"));
  EXPECT_FALSE(q.known("/in/a.mp4", 100, 7, "s2"));
  EXPECT_FALSE(q.known("/in/b.mp4", 100, 7, "s1"));
  EXPECT_TRUE(add(q, "/in/a.mp4", 101));
  EXPECT_TRUE(add(q, "/in/a.mp4", 100, 8));
  EXPECT_TRUE(add(q, "/in/a.mp4", 100, 7, "s2"));

  // Once running, done or failed, still known: never queued twice.
  const auto first = q.claim(kNow);
  ASSERT_TRUE(first);
  EXPECT_FALSE(add(q, "/in/a.mp4"));
  q.set_done(first->id, 8, 1.0);
  EXPECT_FALSE(add(q, "/in/a.mp4"));
  const auto second = q.claim(kNow);
  ASSERT_TRUE(second);
  q.set_failed(second->id, 65, "bad");
  EXPECT_FALSE(add(q, "/in/a.mp4", 101));
  const auto counts = q.counts();
  EXPECT_EQ(counts.at(ItemState::kDone), 1);
  EXPECT_EQ(counts.at(ItemState::kFailed), 1);
  EXPECT_EQ(counts.at(ItemState::kQueued), 2);
  EXPECT_EQ(counts.at(ItemState::kRunning), 0);
}

TEST(WatchQueue, ClaimTakesTheOldestDueItemAndMarksItRunning) {
  test::TempDir dir("queue-order");
  Queue q(dir.file("q.sqlite"));
  // Names in reverse order of arrival: the queue's order is arrival, not name.
  const std::vector<std::string> arrival = {"/in/c.mp4", "/in/b.mp4", "/in/a.mp4"};
  for (const auto& f : arrival) ASSERT_TRUE(add(q, f));
  std::vector<std::string> taken;
  while (auto item = q.claim(kNow)) {
    EXPECT_EQ(item->state, ItemState::kRunning);
    EXPECT_EQ(item->started_at, kNow);
    const auto stored = q.item(item->id);
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->state, ItemState::kRunning);
    taken.push_back(item->input);
  }
  EXPECT_EQ(taken, arrival);
  EXPECT_EQ(q.items(ItemState::kRunning, 10).size(), 3u);
  EXPECT_TRUE(q.items(ItemState::kQueued, 10).empty());
}

TEST(WatchQueue, ARetryWaitsForItsBackoffWithoutHoldingUpLaterItems) {
  test::TempDir dir("queue-retry");
  Queue q(dir.file("q.sqlite"));
  ASSERT_TRUE(add(q, "/in/a.mp4"));
  ASSERT_TRUE(add(q, "/in/b.mp4"));
  const auto a = q.claim(kNow);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->input, "/in/a.mp4");
  q.begin_attempt(a->id, "/out/a.mp4", "cpu");
  q.set_retry(a->id, 73, "cannot create", kNow + 30);
  {
    const auto stored = q.item(a->id);
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->state, ItemState::kQueued);
    EXPECT_EQ(stored->attempts, 1);
    EXPECT_EQ(stored->failures, 1);
    EXPECT_EQ(stored->exit_code, 73);
    EXPECT_EQ(stored->last_error, "cannot create");
    EXPECT_EQ(stored->next_attempt_at, kNow + 30);
    EXPECT_EQ(stored->devices, "cpu");
  }
  // a is older but not due: b goes first, then nothing until a's time.
  const auto b = q.claim(kNow);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->input, "/in/b.mp4");
  EXPECT_FALSE(q.claim(kNow + 29.9));
  const auto again = q.claim(kNow + 30);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, a->id);
  EXPECT_EQ(again->attempts, 1) << "a claim is not an attempt; begin_attempt counts";
}

TEST(WatchQueue, PausedClaimsNothingNamesTheHeldItemAndStaysPausedWhenReopened) {
  test::TempDir dir("queue-pause");
  const std::string path = dir.file("q.sqlite");
  seed_queue(path, {"/in/a.mp4", "/in/b.mp4"});
  {
    Queue q(path);
    EXPECT_FALSE(q.paused());
    q.set_paused(true);
    std::string held = "stale";
    EXPECT_FALSE(q.claim(kNow, &held));
    EXPECT_EQ(held, "/in/a.mp4");
  }
  Queue q(path);
  EXPECT_TRUE(q.paused()) << "a restarted daemon stays paused";
  std::string held;
  EXPECT_FALSE(q.claim(kNow, &held));
  EXPECT_EQ(held, "/in/a.mp4");
  q.set_paused(false);
  const auto a = q.claim(kNow, &held);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->input, "/in/a.mp4");
  EXPECT_EQ(held, "") << "cleared when an item is taken";
  EXPECT_EQ(q.counts().at(ItemState::kQueued), 1);
}

// A daemon killed while an item runs: the item stays `running` in the file, and the next start's
// recover() queues it again, counting the interruption, keeping its attempts.
TEST(WatchQueue, AProcessKilledWhileAnItemRunsLeavesItRecoverable) {
  test::TempDir dir("queue-kill-running");
  const std::string path = dir.file("q.sqlite");
  seed_queue(path, {"/in/a.mp4", "/in/b.mp4"});
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Queue q(path);
    const auto item = q.claim(kNow);
    if (!item) ::_exit(1);
    q.begin_attempt(item->id, "/out/a.mp4", "cpu");
    q.chunk_started(item->id, 0, 9);
    q.chunk_done(item->id, 0, 9, 10);
    q.chunk_started(item->id, 10, -1);
    ::raise(SIGKILL);  // no destructor, no close: as a crash leaves it
    ::_exit(2);
  }
  ASSERT_EQ(reap(pid), 128 + SIGKILL);
  EXPECT_EQ(integrity(path), "ok");
  Queue q(path);
  auto running = q.items(ItemState::kRunning, 10);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].input, "/in/a.mp4");
  EXPECT_EQ(q.recover(), 1);
  EXPECT_EQ(q.recover(), 0) << "nothing left running";
  const auto a = q.claim(kNow);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->input, "/in/a.mp4") << "the interrupted item keeps its place";
  EXPECT_EQ(a->attempts, 1);
  EXPECT_EQ(a->interrupted, 1);
  EXPECT_EQ(a->failures, 0) << "an interruption is not a failure";
  // Its chunks say what the killed run finished (resume within the file).
  const auto chunks = q.chunks(a->id);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_TRUE(chunks[0].done);
  EXPECT_EQ(chunks[0].frames, 10);
  EXPECT_FALSE(chunks[1].done);
  EXPECT_EQ(chunks[1].starts, 1);
}

// A process killed at arbitrary points of a stream of transactions (in the middle of one, too):
// the file opens, is intact, and holds every enqueue that returned, in order, and none twice.
TEST(WatchQueue, AProcessKilledMidTransactionLosesNoEnqueueThatReturned) {
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    test::TempDir dir("queue-kill");
    const std::string path = dir.file("q.sqlite");
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(pipe_fds[0]);
      Queue q(path);
      for (int i = 0;; ++i) {
        if (!add(q, "/in/f-" + std::to_string(i) + ".mp4")) ::_exit(3);
        if (i % 3 == 0) {  // claims too: the kill may land in either kind of transaction
          if (const auto item = q.claim(kNow)) q.set_done(item->id, 1, 0.1);
        }
        const int32_t n = i;
        if (::write(pipe_fds[1], &n, sizeof n) != ssize_t(sizeof n)) ::_exit(4);
      }
    }
    ::close(pipe_fds[1]);
    // Kill after a number of enqueues reported that differs by round, while more are under way.
    int32_t last = -1, n = 0;
    const int32_t kill_after = 20 + 37 * round;
    while (last < kill_after && ::read(pipe_fds[0], &n, sizeof n) == ssize_t(sizeof n)) last = n;
    ::kill(pid, SIGKILL);
    while (::read(pipe_fds[0], &n, sizeof n) == ssize_t(sizeof n)) last = n;  // until EOF
    ::close(pipe_fds[0]);
    ASSERT_EQ(reap(pid), 128 + SIGKILL);
    ASSERT_GE(last, kill_after);

    EXPECT_EQ(integrity(path), "ok");
    Queue q(path);
    std::vector<Item> all;
    for (ItemState s : {ItemState::kQueued, ItemState::kRunning, ItemState::kDone}) {
      for (Item& it : q.items(s, 100000)) all.push_back(it);
    }
    std::sort(all.begin(), all.end(), [](const Item& a, const Item& b) { return a.id < b.id; });
    // Every reported enqueue is there; at most the one under way at the kill beyond them.
    ASSERT_GE(all.size(), size_t(last + 1));
    ASSERT_LE(all.size(), size_t(last + 2));
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].input, "/in/f-" + std::to_string(i) + ".mp4") << "arrival order";
    }
    // A claim is one transaction: an item is running only with its done not yet recorded.
    EXPECT_LE(q.items(ItemState::kRunning, 100).size(), 1u);
    q.recover();
    EXPECT_TRUE(q.items(ItemState::kRunning, 100).empty());
    EXPECT_TRUE(add(q, "/in/after.mp4")) << "the queue takes new files after the crash";
  }
}

// Two processes, each with its own connection, claiming from one queue at once: BEGIN IMMEDIATE
// and busy_timeout make every item go to exactly one of them.
TEST(WatchQueue, ClaimsFromTwoProcessesAtOnceTakeEachItemOnce) {
  constexpr int kItems = 200;
  test::TempDir dir("queue-two");
  const std::string path = dir.file("q.sqlite");
  std::vector<std::string> inputs;
  for (int i = 0; i < kItems; ++i) inputs.push_back("/in/f-" + std::to_string(i) + ".mp4");
  seed_queue(path, inputs);
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int child = 0; child < 2; ++child) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      Queue q(path);
      char c;
      if (::read(go[0], &c, 1) != 0) ::_exit(5);  // start together, when the parent closes
      const std::string mine = std::to_string(child);
      while (const auto item = q.claim(kNow)) {
        q.begin_attempt(item->id, "/out/" + mine, mine);
        q.set_done(item->id, 1, 0.0);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (pid_t pid : children) EXPECT_EQ(reap(pid), 0);
  Queue q(path);
  const auto done = q.items(ItemState::kDone, 1000);
  ASSERT_EQ(done.size(), size_t(kItems));
  std::set<std::string> taken;
  for (const Item& it : done) {
    EXPECT_EQ(it.attempts, 1) << it.input << " claimed twice";
    taken.insert(it.input);
  }
  EXPECT_EQ(taken, std::set<std::string>(inputs.begin(), inputs.end()));
  EXPECT_EQ(q.counts().at(ItemState::kQueued), 0);
}

TEST(WatchQueue, InterruptionsFailuresAndRequeueKeepTheirCounts) {
  test::TempDir dir("queue-states");
  Queue q(dir.file("q.sqlite"));
  ASSERT_TRUE(add(q, "/in/a.mp4"));
  auto a = q.claim(kNow);
  ASSERT_TRUE(a);
  q.begin_attempt(a->id, "/out/a.mp4");
  q.set_interrupted(a->id);  // SIGTERM: queued again at once, not a failure
  auto stored = q.item(a->id);
  EXPECT_EQ(stored->state, ItemState::kQueued);
  EXPECT_EQ(stored->interrupted, 1);
  EXPECT_EQ(stored->failures, 0);
  EXPECT_EQ(stored->next_attempt_at, 0);

  a = q.claim(kNow);
  ASSERT_TRUE(a);
  q.begin_attempt(a->id, "/out/a.mp4");
  q.set_committing(a->id);
  q.set_failed(a->id, 65, "a.mp4: not a video");
  stored = q.item(a->id);
  EXPECT_EQ(stored->state, ItemState::kFailed);
  EXPECT_FALSE(stored->committing);
  EXPECT_GT(stored->finished_at, 0);
  // A failure whose source is not yet disposed of is not taken from under its worker.
  EXPECT_FALSE(q.requeue_failed(a->id));
  EXPECT_EQ(q.undisposed().size(), 1u);
  q.set_disposed(a->id, "/failed/a.mp4");
  EXPECT_TRUE(q.undisposed().empty());
  EXPECT_TRUE(q.requeue_failed(a->id));
  EXPECT_FALSE(q.requeue_failed(a->id)) << "no longer failed";
  stored = q.item(a->id);
  EXPECT_EQ(stored->state, ItemState::kQueued);
  EXPECT_FALSE(stored->disposed);
  EXPECT_EQ(stored->source_now, "");
  EXPECT_EQ(stored->attempts, 2);
  EXPECT_EQ(stored->failures, 1);
  EXPECT_EQ(stored->interrupted, 1);
  EXPECT_EQ(stored->exit_code, 65);
  EXPECT_EQ(stored->last_error, "a.mp4: not a video");

  a = q.claim(kNow);
  ASSERT_TRUE(a);
  q.begin_attempt(a->id, "/out/a.mp4");
  q.set_progress(a->id, 4, 8);
  EXPECT_EQ(q.item(a->id)->frames_total, 8);
  q.set_done(a->id, 8, 2.5);
  stored = q.item(a->id);
  EXPECT_EQ(stored->state, ItemState::kDone);
  EXPECT_EQ(stored->exit_code, 0);
  EXPECT_EQ(stored->attempts, 3);
  const Totals t = q.totals();
  EXPECT_EQ(t.done, 1);
  EXPECT_EQ(t.failed, 0);
  EXPECT_EQ(t.frames, 8);
  EXPECT_EQ(t.seconds, 2.5);
  ASSERT_EQ(q.history(10).size(), 1u);
  q.remove(a->id);
  EXPECT_FALSE(q.item(a->id));
}

TEST(WatchQueue, AChunkIsFinishedOnceAndCountsTheStartsBeforeIt) {
  test::TempDir dir("queue-chunks");
  Queue q(dir.file("q.sqlite"));
  ASSERT_TRUE(add(q, "/in/a.mp4"));
  const auto a = q.claim(kNow);
  ASSERT_TRUE(a);
  q.chunk_started(a->id, 0, 9);
  q.chunk_started(a->id, 0, 9);  // a second run started it again
  q.chunk_done(a->id, 0, 9, 10);
  q.chunk_done(a->id, 0, 9, 99);   // found finished by a later run: changes nothing
  q.chunk_started(a->id, 0, 9);    // work on a finished chunk: starts grows past starts_at_done
  q.chunk_done(a->id, 10, -1, 5);  // finished without a recorded start
  const auto chunks = q.chunks(a->id);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].first_frame, 0);
  EXPECT_EQ(chunks[0].last_frame, 9);
  EXPECT_TRUE(chunks[0].done);
  EXPECT_EQ(chunks[0].frames, 10);
  EXPECT_EQ(chunks[0].starts_at_done, 2);
  EXPECT_EQ(chunks[0].starts, 3);
  EXPECT_EQ(chunks[1].last_frame, -1);
  EXPECT_TRUE(chunks[1].done);
  EXPECT_EQ(chunks[1].starts, 0);
  EXPECT_TRUE(q.chunks(a->id + 1).empty());
}

TEST(WatchQueue, ALocalQueueUsesWalAndAnUnusablePathIsAnOutputErrorNamingIt) {
  test::TempDir dir("queue-open");
  {
    Queue q(dir.file("sub/q.sqlite"));  // its folder is made
    EXPECT_TRUE(q.wal());
  }
  test::write_text(dir.file("file"), "not a folder");
  const std::string bad = dir.file("file/q.sqlite");
  try {
    Queue q(bad);
    FAIL() << "opened a queue below a regular file";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("file")), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), kExitCantCreat);
  }
}

}  // namespace
}  // namespace wm::watch
