#include "watch/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"
#include "watch/detector.h"
#include "watch/queue.h"
#include "watch/status.h"
#include "watch/status_server.h"
#include "watch/watch_spec.h"
#include "watch/worker.h"

namespace wm::watch {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
std::atomic<int> g_stop_signals{0};
int g_wake_fd = -1;  // write end of the self-pipe that wakes the loop's poll()

extern "C" void wm_watch_on_signal(int sig) {
  if (sig == SIGHUP) {
    g_reload.store(true);
  } else {
    g_stop.store(true);
    if (g_stop_signals.fetch_add(1) > 0) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    }
  }
  if (g_wake_fd >= 0) {
    const char c = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_wake_fd, &c, 1);
  }
}

// The self-pipe and the handlers; restored on destruction.
class Signals {
 public:
  Signals() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fds_[0] = fds_[1] = -1;
    g_wake_fd = fds_[1];
    g_stop = false;
    g_reload = false;
    g_stop_signals = 0;
    struct sigaction sa {};
    sa.sa_handler = wm_watch_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    // A write past RLIMIT_FSIZE fails (EFBIG: that output's or that move's error) instead of
    // ending the daemon.
    ::signal(SIGXFSZ, SIG_IGN);
  }
  ~Signals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    g_wake_fd = -1;
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int fd() const { return fds_[0]; }
  void drain() const {
    char buf[64];
    while (fds_[0] >= 0 && ::read(fds_[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

// One daemon per queue: an exclusive flock(2) on "<queue>.lock", held for the daemon's life (the
// kernel lets go of it when the process ends, however it ends). The holder's pid is written in
// it, so that a second daemon can say whose it is. On NFS the lock is the server's (flock is
// emulated with whole-file POSIX locks there), so it holds across hosts too.
class QueueLock {
 public:
  explicit QueueLock(const std::string& queue) : path_(queue + ".lock") {
    fs::make_dirs(fs::parent_dir(path_));
    fd_ = fs::open_lock_file(path_);
    if (fd_ < 0) {
      throw OutputError(path_ + ": cannot open the queue's lock file: " + std::strerror(errno),
                        kExitCantCreat);
    }
    int rc;
    while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      const int err = errno;
      std::string holder;
      char buf[32] = {0};
      if (err == EWOULDBLOCK && ::pread(fd_, buf, sizeof buf - 1, 0) > 0) {
        const long pid = std::strtol(buf, nullptr, 10);
        if (pid > 0) holder = " (pid " + std::to_string(pid) + ")";
      }
      ::close(fd_);
      if (err != EWOULDBLOCK) {
        throw OutputError(path_ + ": cannot lock: " + std::strerror(err), kExitIoErr);
      }
      throw Error(queue + ": another wmbatch watch" + holder +
                      " is running on this queue; one daemon per queue (stop it first, or give "
                      "this WATCH.yaml a queue: of its own)",
                  kExitUnavailable);
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
      log::get("watch")->warn("{}: cannot write our pid into it: {}", path_, std::strerror(errno));
    }
  }
  ~QueueLock() { ::close(fd_); }
  QueueLock(const QueueLock&) = delete;
  QueueLock& operator=(const QueueLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// The pid of the daemon (of this host) that holds the queue's lock, 0 when none does, -1 when
// one does whose pid is unknown. Read from the kernel's table of locks (/proc/locks), not by
// taking the lock: even a brief shared lock taken here would make a daemon starting at that
// moment exit 69. A lock line names the device and inode (the
// device as the file system's, which may differ from stat's on btrfs or overlayfs: there the
// pid written in the lock file must match too).
long lock_holder(const std::string& queue) {
  const std::string path = queue + ".lock";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  long written = 0;
  if (std::FILE* f = std::fopen(path.c_str(), "re")) {
    if (std::fscanf(f, "%ld", &written) != 1) written = 0;
    std::fclose(f);
  }
  std::FILE* locks = std::fopen("/proc/locks", "re");
  if (!locks) return 0;
  char line[512];
  long holder = 0;
  while (!holder && std::fgets(line, sizeof line, locks)) {
    char kind[32] = {0}, access[32] = {0};
    long pid = 0;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long long inode = 0;
    // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" ("->" marks a blocked waiter: skipped)
    if (std::sscanf(line, "%*d: %31s %*s %31s %ld %x:%x:%llu", kind, access, &pid, &dev_major,
                    &dev_minor, &inode) != 6) {
      continue;
    }
    if (std::strcmp(kind, "FLOCK") != 0 || std::strcmp(access, "WRITE") != 0) continue;
    if (inode != st.st_ino) continue;
    const bool same_device = dev_major == major(st.st_dev) && dev_minor == minor(st.st_dev);
    // A holder in another pid namespace is listed as pid 0: the pid it wrote stands in.
    if (same_device || (written > 0 && pid == written)) holder = pid > 0 ? pid : written;
    if (same_device && holder <= 0) holder = -1;
  }
  std::fclose(locks);
  return holder;
}

// The status page's action token: 128 random bits as hex, new at every start of the daemon.
std::string make_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw Error(std::string("status page: cannot make a token: ") + std::strerror(errno),
                  kExitSoftware);
    }
    got += size_t(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

const WatchEntry* entry_of(const WatchSpec& spec, const Item& item) {
  for (const WatchEntry& e : spec.entries) {
    if (e.folder == item.folder && e.settings == item.settings) return &e;
  }
  return nullptr;
}

// State shared by the loop, the workers and the status page.
class Daemon {
 public:
  Daemon(std::shared_ptr<const WatchSpec> spec, Queue& queue)
      : spec_(std::move(spec)), queue_(queue) {}

  int run(const Signals& signals);

 private:
  std::shared_ptr<const WatchSpec> spec() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return spec_;
  }
  void resume_disposals();
  void start_workers(int count);
  void work(size_t index);
  void reload();
  void start_server();
  std::unique_ptr<StatusServer> make_server(const WatchSpec& spec);
  nlohmann::json snapshot();
  ActionResult act(const Action& action);
  ActionResult retry(int64_t id);
  std::unique_ptr<Detector> make_detector(const WatchSpec& spec);

  mutable std::mutex mutex_;  // spec_, generation_, the workers' wake-ups
  std::condition_variable wake_;
  std::shared_ptr<const WatchSpec> spec_;
  uint64_t generation_ = 0;
  Queue& queue_;
  std::atomic<bool> cancel_{false};
  std::mutex workers_mutex_;  // workers_ (grown by a reload while the status page reads it)
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::unique_ptr<StatusServer> server_;
  const std::string token_ = make_token();  // what the page's actions need (status_server.h)
  bool token_logged_ = false;               // once per start, with the first page
  std::atomic<bool> held_logged_{false};    // "paused: ... waits", once per pause
};

void Daemon::resume_disposals() {
  const auto spec = this->spec();
  for (const Item& item : queue_.undisposed()) {
    const WatchEntry* entry = entry_of(*spec, item);
    if (!entry) continue;
    if (item.state == ItemState::kDone) {
      dispose_done(queue_, item, *entry);
    } else {
      dispose_failed(queue_, item, *entry);
    }
  }
}

void Daemon::start_workers(int count) {
  std::lock_guard<std::mutex> lock(workers_mutex_);
  while (int(workers_.size()) < count) {
    const size_t index = workers_.size();
    workers_.push_back(std::make_unique<Worker>(int(index), queue_, cancel_));
    threads_.emplace_back([this, index] { work(index); });
  }
}

void Daemon::work(size_t index) {
  auto log = log::get("watch");
  Worker& worker = [&]() -> Worker& {
    std::lock_guard<std::mutex> lock(workers_mutex_);
    return *workers_[index];
  }();
  uint64_t seen_generation = 0;
  while (!cancel_.load()) {
    std::shared_ptr<const WatchSpec> spec;
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spec = spec_;
      generation = generation_;
    }
    std::optional<Item> item;
    if (int(index) < spec->max_parallel) {
      try {
        std::string held;
        item = queue_.claim(unix_now(), &held);
        if (!held.empty() && !held_logged_.exchange(true)) {
          log->info("paused: {} (and any file after it) waits until the queue is resumed", held);
        }
      } catch (const Error& e) {
        log->error("{}", e.what());
      }
    }
    if (!item) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(500));
      continue;
    }
    if (generation != seen_generation) {
      worker.drop_runners();  // WATCH.yaml was reloaded: jobs may have changed
      seen_generation = generation;
    }
    const WatchEntry* entry = entry_of(*spec, *item);
    if (!entry) {
      queue_.remove(item->id);
      log->info("{}: no watch entry takes it any more (WATCH.yaml changed); dropped", item->input);
      continue;
    }
    try {
      worker.run(*item, *entry, *spec);
    } catch (const std::exception& e) {  // the queue itself failed (disk full, I/O error)
      log->error("{}: {}", item->input, e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

nlohmann::json Daemon::snapshot() {
  std::vector<LiveItem> live;
  {
    std::lock_guard<std::mutex> lock(workers_mutex_);
    for (const auto& w : workers_) {
      if (auto l = w->live()) live.push_back(*l);
    }
  }
  return status_json(queue_, live, *spec(), true);
}

ActionResult Daemon::act(const Action& action) {
  if (action.name == "retry") return retry(action.id);
  const bool pause = action.name == "pause";
  queue_.set_paused(pause);  // from here on no claim takes an item (Queue::claim)
  held_logged_.store(false);
  if (pause) {
    log::get("watch")->info("paused: running files finish, no new file starts");
    return {303, "paused: running files finish, no new file starts"};
  }
  wake_.notify_all();
  log::get("watch")->info("resumed");
  return {303, "resumed"};
}

ActionResult Daemon::retry(int64_t id) {
  const auto item = queue_.item(id);
  const std::string name = "#" + std::to_string(id);
  if (!item) return {404, name + ": no such file in the queue"};
  if (item->state != ItemState::kFailed) {
    return {409, name + " (" + item->input + ") is " + to_string(item->state) +
                     ", not failed: only a failed file is retried"};
  }
  if (!item->disposed) {
    return {409, name + " (" + item->input + ") is still being given up (its source is being " +
                     "moved); retry in a moment"};
  }
  if (!entry_of(*spec(), *item)) {
    return {409, name + " (" + item->input + "): no watch entry takes it any more (WATCH.yaml " +
                     "changed); put the file into a watched folder instead"};
  }
  // The source goes back first, then the queue: a worker that claims the item finds it in place.
  const std::string why = restore_failed_source(*item);
  if (!why.empty()) return {409, name + ": " + why};
  if (!queue_.requeue_failed(id)) {
    return {409, name + " (" + item->input + ") changed state meanwhile; not retried"};
  }
  wake_.notify_all();
  log::get("watch")->info("{}: queued again by a retry from the status page (attempt {} next)",
                          item->input, item->attempts + 1);
  return {303, name + " queued again: " + item->input};
}

void Daemon::start_server() {
  const auto spec = this->spec();
  server_.reset();
  if (spec->http.enabled) server_ = make_server(*spec);
}

std::unique_ptr<StatusServer> Daemon::make_server(const WatchSpec& spec) {
  auto server = std::make_unique<StatusServer>(
      spec.http.host, spec.http.port, [this] { return snapshot(); }, token_,
      [this](const Action& a) { return act(a); });
  if (!token_logged_) {
    // Printed once: whoever reads the daemon's log may act on the queue from 127.0.0.1.
    log::get("watch")->info(
        "status page actions token: {} (retry, pause and resume by POST from 127.0.0.1 need it; "
        "the page served there carries it)",
        token_);
    token_logged_ = true;
  }
  return server;
}

std::unique_ptr<Detector> Daemon::make_detector(const WatchSpec& spec) {
  auto detector = std::make_unique<Detector>(
      spec, [this](const std::string& path, int64_t size, int64_t mtime_ns, const WatchEntry& e) {
        return queue_.known(path, size, mtime_ns, e.settings);
      });
  detector->rescan();
  return detector;
}

int Daemon::run(const Signals& signals) {
  auto log = log::get("watch");
  std::shared_ptr<const WatchSpec> spec = this->spec();
  if (const int n = queue_.recover()) {
    log->info("{} item(s) were running when the daemon last stopped; queued again", n);
  }
  resume_disposals();
  start_server();
  start_workers(spec->max_parallel);
  auto detector = make_detector(*spec);
  std::string folders;
  for (const WatchEntry& e : spec->entries) folders += (folders.empty() ? "" : ", ") + e.folder;
  log->info("watching {} (queue {}{})", folders, queue_.path(),
            queue_.wal() ? "" : ", rollback journal");

  // Rescans finished (walk, settle check and queueing of what settled), logged at debug level as
  // `scan N done` so that an observer (the tests) can tell that the daemon looked again.
  int64_t scans = 0;
  bool rescanned = true;  // make_detector rescanned
  auto last_scan = Clock::now();
  while (!g_stop.load()) {
    spec = this->spec();
    const double tick = std::clamp(spec->settle_seconds / 4, 0.05, 0.5);
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {detector->fd(), POLLIN, 0}};
    ::poll(fds, detector->fd() >= 0 ? 2 : 1, int(tick * 1000));
    signals.drain();
    if (g_stop.load()) break;
    if (g_reload.exchange(false)) {
      const uint64_t before = generation_;
      reload();
      if (generation_ != before) {
        spec = this->spec();
        detector = make_detector(*spec);
        last_scan = Clock::now();
        rescanned = true;
      }
    }
    detector->read_events();
    if (seconds_since(last_scan) >= spec->poll_seconds) {
      detector->rescan();
      last_scan = Clock::now();
      rescanned = true;
    }
    bool queued = false;
    for (const ReadyFile& f : detector->take_ready()) {
      try {
        if (queue_.enqueue(f.path, f.size, f.mtime_ns, f.entry->settings, f.entry->folder)) {
          log->info("queued: {}", f.path);
          queued = true;
        }
      } catch (const Error& e) {
        log->error("{}", e.what());
      }
    }
    if (queued) wake_.notify_all();
    if (rescanned) {
      log->debug("scan {} done: {} file(s) settling", ++scans, detector->candidates());
      rescanned = false;
    }
  }

  log->info("stopping: the running files stop at their next slice boundary");
  cancel_.store(true);
  wake_.notify_all();
  for (auto& t : threads_) t.join();
  server_.reset();
  log->info("stopped");
  return kExitOk;
}

void Daemon::reload() {
  auto log = log::get("watch");
  const auto old = spec();
  try {
    auto fresh = std::make_shared<WatchSpec>(load_watch_file(old->file));
    if (fresh->queue != old->queue) {
      log->warn("queue: a new queue file takes a restart; keeping {}", old->queue);
      fresh->queue = old->queue;
    }
    const bool http_changed = fresh->http.enabled != old->http.enabled ||
                              fresh->http.host != old->http.host ||
                              fresh->http.port != old->http.port;
    // The new status page first: a reload that cannot have it takes nothing of the new file.
    std::unique_ptr<StatusServer> page;
    if (http_changed && fresh->http.enabled) {
      try {
        page = make_server(*fresh);
      } catch (const Error&) {
        // The running page may hold that port itself (only the host changed): it lets go, and
        // comes back when the new address fails all the same.
        if (!server_ || old->http.port != fresh->http.port) throw;
        server_.reset();
        try {
          page = make_server(*fresh);
        } catch (const Error&) {
          try {
            server_ = make_server(*old);
          } catch (const Error& again) {
            log->error(
                "status page: cannot listen on its old address again either ({}); it is "
                "down until the next reload",
                again.what());
          }
          throw;
        }
      }
    }
    // Nothing below fails: the new file takes effect as a whole.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      spec_ = fresh;
      ++generation_;
    }
    if (http_changed) server_ = std::move(page);  // the old page stops (none when http is off)
    start_workers(fresh->max_parallel);
    wake_.notify_all();
    log->info("reloaded {} ({} folder(s), max_parallel {})", fresh->file, fresh->entries.size(),
              fresh->max_parallel);
  } catch (const Error& e) {
    log->error("reload failed; keeping the running configuration: {}", e.what());
  }
}

}  // namespace

int run_daemon(const std::string& watch_file) {
  std::shared_ptr<const WatchSpec> spec;
  try {
    spec = std::make_shared<WatchSpec>(load_watch_file(watch_file));
  } catch (const Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
  Signals signals;
  try {
    const QueueLock lock(spec->queue);
    Queue queue(spec->queue);
    Daemon daemon(spec, queue);
    return daemon.run(signals);
  } catch (const Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
}

int print_status(const std::string& watch_file, bool json) {
  try {
    const WatchSpec spec = load_watch_file(watch_file);
    struct stat st {};
    if (::stat(spec.queue.c_str(), &st) != 0) {
      if (json) {
        const nlohmann::json none = {{"queue_file", spec.queue},
                                     {"daemon", false},
                                     {"paused", false},
                                     {"counts", nlohmann::json::object()}};
        std::fputs(status_json_text(none).c_str(), stdout);
      } else {
        std::printf("queue %s: none yet (the daemon has not run)\n", spec.queue.c_str());
      }
      return kExitOk;
    }
    Queue queue(spec.queue);
    nlohmann::json s = status_json(queue, {}, spec, false);
    // Whether a daemon runs on this queue (it holds the queue's lock), and which.
    const long pid = lock_holder(spec.queue);
    s["daemon"] = pid != 0;
    if (pid > 0) s["daemon_pid"] = pid;
    std::fputs(json ? status_json_text(s).c_str() : status_text(s).c_str(), stdout);
    return kExitOk;
  } catch (const Error& e) {
    std::fprintf(stderr, "wmbatch: %s\n", e.what());
    return e.exit_code();
  }
}

}  // namespace wm::watch
