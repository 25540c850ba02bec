#include "watch/worker.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "parallel/devices.h"
#include "scheduler/journal.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"
#include "watch/device_share.h"

namespace wm::watch {
namespace {

namespace stdfs = std::filesystem;

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The hidden name the job writes to, beside the output.
std::string staging_path(const std::string& output, int64_t id) {
  return fs::parent_dir(output) + "/.wmwatch-" + std::to_string(id) + "-" + base_name(output);
}

// Removes what an item's runs leave beside its staging name once it is complete, given up or
// dropped: the chunk work folder (journal, segments) and the staging name's output lock
// (io/output_file.h: ".<name>.wmlock"), which a killed holder leaves behind and which no later
// run takes again when the file was complete.
void remove_work_folder(const std::string& staging) {
  const std::string lock = fs::parent_dir(staging) + "/." + base_name(staging) + ".wmlock";
  if (::unlink(lock.c_str()) != 0 && errno != ENOENT) {
    log::get("watch")->warn("{}: cannot remove: {}", lock, std::strerror(errno));
  }
  const std::string dir = sched::chunk_work_folder(staging);
  std::error_code ec;
  if (!stdfs::exists(dir, ec)) return;
  stdfs::remove_all(dir, ec);
  if (ec) log::get("watch")->warn("{}: cannot remove: {}", dir, ec.message());
}

// rename(2) that does not replace an existing `to` unless `replace`. OutputError(73) when `to`
// exists.
void rename_into_place(const std::string& from, const std::string& to, bool replace) {
  if (!replace) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
    if (errno == EEXIST) {
      throw OutputError(to + ": output exists (set on_exists: overwrite or skip)", kExitCantCreat);
    }
    // File systems without RENAME_NOREPLACE: check, then rename (a narrow race).
    if (errno != EINVAL && errno != ENOSYS) {
      throw OutputError(to + ": cannot rename into place: " + std::strerror(errno), kExitIoErr);
    }
    if (exists(to)) {
      throw OutputError(to + ": output exists (set on_exists: overwrite or skip)", kExitCantCreat);
    }
  }
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw OutputError(to + ": cannot rename into place: " + std::strerror(errno), kExitIoErr);
  }
}

// `path` in `folder`, or with ".1", ".2", ... before its extension when that name is taken.
std::string free_name(const std::string& folder, const std::string& relative) {
  const stdfs::path p = stdfs::path(folder) / relative;
  if (!exists(p.string())) return p.string();
  for (int i = 1;; ++i) {
    stdfs::path q = p;
    q.replace_filename(p.stem().string() + "." + std::to_string(i) + p.extension().string());
    if (!exists(q.string())) return q.string();
  }
}

// Copies `source` to `target` on another file system without a partial file ever at `target`:
// into a temp name beside it, created exclusively, fsynced (with the source's mode and times),
// then renamed into place (not over a file that appeared there meanwhile). On failure (a full
// disk) the temp file is removed and the source is untouched. Throws OutputError.
void copy_across(const std::string& source, const std::string& target) {
  const std::string temp = fs::temp_path_for(target);
  auto fail = [&](const std::string& what, int err) {
    ::unlink(temp.c_str());
    throw OutputError(
        source + ": cannot copy to " + target + ": " + what + ": " + std::strerror(err),
        kExitIoErr);
  };
  struct Fd {
    int fd = -1;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } in, out;
  in.fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) {
    throw OutputError(source + ": cannot open to copy it: " + std::strerror(errno), kExitIoErr);
  }
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) {
    throw OutputError(source + ": cannot stat: " + std::strerror(errno), kExitIoErr);
  }
  out.fd = fs::create_exclusive(temp, int(st.st_mode & 0777));
  if (out.fd < 0) {
    throw OutputError(source + ": cannot create " + temp + ": " + std::strerror(errno), kExitIoErr);
  }
  std::vector<char> buffer(size_t(1) << 20);
  for (;;) {
    const ssize_t n = ::read(in.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read", errno);
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out.fd, buffer.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("write", errno);
      done += w;
    }
  }
  const timespec times[2] = {st.st_atim, st.st_mtim};
  ::futimens(out.fd, times);
  if (::fsync(out.fd) != 0) fail("fsync", errno);
  const int closed = ::close(out.fd);
  out.fd = -1;
  if (closed != 0) fail("close", errno);
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) fail("rename", errno);
    if (exists(target)) fail("rename", EEXIST);
    if (::rename(temp.c_str(), target.c_str()) != 0) fail("rename", errno);
  }
}

// Moves `source` to `target` (not over a file there): a rename, or across file systems a copy
// (copy_across), the folder fsynced, and then the source removed.
void move_file(const std::string& source, const std::string& target) {
  int rc = ::renameat2(AT_FDCWD, source.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
    rc = ::rename(source.c_str(), target.c_str());  // a file system without RENAME_NOREPLACE
  }
  if (rc != 0) {
    if (errno != EXDEV) {
      throw OutputError(source + ": cannot move to " + target + ": " + std::strerror(errno),
                        kExitIoErr);
    }
    copy_across(source, target);
    fs::fsync_path(fs::parent_dir(target));
    if (::unlink(source.c_str()) != 0 && errno != ENOENT) {
      log::get("watch")->warn("{}: copied to {}, but cannot remove it: {}", source, target,
                              std::strerror(errno));
    }
    fs::fsync_path(fs::parent_dir(source));
  }
  fs::fsync_path(fs::parent_dir(target));
}

// Moves a source into `folder`, keeping its path below the watched folder. Returns the new path.
std::string move_source(const std::string& source, const WatchEntry& entry,
                        const std::string& folder) {
  std::string relative = stdfs::path(source).lexically_relative(entry.folder).string();
  if (relative.empty() || relative.compare(0, 2, "..") == 0) relative = base_name(source);
  const std::string target = free_name(folder, relative);
  fs::make_dirs(fs::parent_dir(target));
  move_file(source, target);
  return target;
}

// Whether the file at `path` has the size and mtime the item recorded.
bool same_version(const Item& item, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return int64_t(st.st_size) == item.size && mtime_ns == item.mtime_ns;
}

// Whether the file at `item.input` is still the version the item recorded (size, mtime and,
// when the worker saw it, the very file): a new version moved over it while the old one ran is
// a file of its own, never moved or deleted in its place.
bool still_the_same(const Item& item, const SourceFile* seen) {
  struct stat st {};
  if (::stat(item.input.c_str(), &st) != 0) return true;  // gone: nothing to mistake
  const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (int64_t(st.st_size) != item.size || mtime_ns != item.mtime_ns) return false;
  return !seen || (st.st_dev == seen->dev && st.st_ino == seen->ino);
}

// Exit codes of failures that will not pass by retrying (bad or missing input).
bool retryable(int exit_code) { return exit_code != kExitDataErr && exit_code != kExitNoInput; }

// A failure because the process ran out of descriptors or memory (EMFILE, ENFILE, ENOMEM), which
// passes once they are free again, whatever the failing call made of it (opening an input reports
// it as a bad input, 65).
bool out_of_resources(const std::exception& e) {
  if (const auto* av = dynamic_cast<const AvError*>(&e)) {
    // AVERROR(e) is -e.
    for (const int err : {EMFILE, ENFILE, ENOMEM}) {
      if (av->av_code() == -err) return true;
    }
  }
  const std::string what = e.what();
  for (const int err : {EMFILE, ENFILE}) {
    if (what.find(std::strerror(err)) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

void dispose_done(Queue& queue, const Item& item, const WatchEntry& entry, const SourceFile* seen) {
  auto log = log::get("watch");
  try {
    if (entry.on_done != OnDone::kKeep && !still_the_same(item, seen)) {
      log->warn(
          "{}: replaced by a new version while it was processed; the new version stays "
          "(it is a file of its own)",
          item.input);
      queue.set_disposed(item.id, item.input);
      return;
    }
    switch (entry.on_done) {
      case OnDone::kKeep:
        queue.set_disposed(item.id, item.input);
        return;
      case OnDone::kMove:
        if (!exists(item.input)) break;
        queue.set_disposed(item.id, move_source(item.input, entry, entry.done_folder));
        return;
      case OnDone::kDelete:
        if (::unlink(item.input.c_str()) != 0 && errno != ENOENT) {
          throw OutputError(item.input + ": cannot delete: " + std::strerror(errno), kExitIoErr);
        }
        fs::fsync_path(fs::parent_dir(item.input));
        break;
    }
    queue.set_disposed(item.id, "");
  } catch (const Error& e) {
    log->error("{} (the output is complete; the source stays where it is)", e.what());
    queue.set_disposed(item.id, item.input);
  }
}

void dispose_failed(Queue& queue, const Item& item, const WatchEntry& entry,
                    const SourceFile* seen) {
  auto log = log::get("watch");
  std::string now_at = item.input;
  try {
    const bool same = still_the_same(item, seen);
    if (!same) {
      log->warn(
          "{}: replaced by a new version while it was processed; the new version stays "
          "(it is a file of its own)",
          item.input);
    }
    if (!entry.failed_folder.empty() && same && exists(item.input)) {
      now_at = move_source(item.input, entry, entry.failed_folder);
    }
    const std::string note = "input: " + item.input + "\nerror: " + item.last_error +
                             "\nexit_code: " + std::to_string(item.exit_code) +
                             "\nattempts: " + std::to_string(item.attempts) +
                             "\nfailed_at: " + utc_text(item.finished_at, "%Y-%m-%dT%H:%M:%SZ") +
                             "\n";
    fs::write_file_atomic(now_at + ".error.txt", note);
  } catch (const Error& e) {
    log->error("{}", e.what());
  }
  queue.set_disposed(item.id, now_at);
}

std::string restore_failed_source(const Item& item) {
  const std::string& from = item.source_now;
  const std::string& to = item.input;
  if (from.empty() || from == to || !exists(from)) {
    // Never moved (no failed_folder), or moved back already (by a retry a kill interrupted
    // before the queue recorded it, or by hand).
    if (same_version(item, to)) {
      if (!from.empty() && from != to) ::unlink((from + ".error.txt").c_str());
      ::unlink((to + ".error.txt").c_str());
      return "";
    }
    return (from.empty() ? to : from) + ": the failed file is no longer there (" +
           (exists(to) ? to + " is another version" : "nothing to retry") + ")";
  }
  if (!same_version(item, from)) {
    return from + ": changed since it failed; it is a new file (put it into the watched folder)";
  }
  if (exists(to)) {
    return to + ": another file is there now; the failed file stays at " + from;
  }
  fs::make_dirs(fs::parent_dir(to));
  move_file(from, to);
  // The note said why it failed where it lay; the queue keeps the error.
  if (::unlink((from + ".error.txt").c_str()) == 0) fs::fsync_path(fs::parent_dir(from));
  return "";
}

Worker::Worker(int index, Queue& queue, const std::atomic<bool>& cancel)
    : index_(index), queue_(queue), cancel_(cancel) {}

std::optional<LiveItem> Worker::live() const {
  std::lock_guard<std::mutex> lock(live_mutex_);
  if (!live_) return std::nullopt;
  LiveItem out = *live_;
  out.frames = live_base_ + (live_counting_ ? progress_.frames() : 0);
  out.frames_total = live_total_ > 0 ? live_total_ : progress_.frames_total();
  out.seconds = seconds_since(live_start_);
  return out;
}

sched::ChunkRunners& Worker::runners_for(const WatchEntry& entry, const JobSpec& job) {
  std::string key = entry.settings + " " + job.devices;
  for (int id : job.device_ids) key += " " + std::to_string(id);
  auto& runners = runners_[key];
  if (!runners) runners = std::make_unique<sched::ChunkRunners>(job);
  return *runners;
}

void Worker::run(const Item& item, const WatchEntry& entry, const WatchSpec& spec) {
  auto log = log::get("watch");
  try {
    process(item, entry, spec);
  } catch (const std::exception& e) {
    const Error* err = dynamic_cast<const Error*>(&e);
    const int code = out_of_resources(e) ? int(kExitTempFail)
                     : err               ? err->exit_code()
                                         : int(kExitSoftware);
    if (code == kExitTempFail && cancel_.load()) {
      queue_.set_interrupted(item.id);
      log->info("{}: stopped; it starts again on the next run", item.input);
      return;
    }
    std::string message = err ? e.what() : item.input + ": internal error: " + e.what();
    if (message.find(item.input) == std::string::npos) message = item.input + ": " + message;
    const int failures = item.failures + 1;
    if (retryable(code) && failures < spec.retry.max_attempts) {
      const double wait = std::min(spec.retry.backoff_max_seconds,
                                   spec.retry.backoff_seconds * std::pow(2.0, failures - 1));
      queue_.set_retry(item.id, code, message, unix_now() + wait);
      log->warn("{} (exit {}; attempt {} of {}, retrying in {:.1f} s)", message, code, failures,
                spec.retry.max_attempts, wait);
    } else {
      queue_.set_failed(item.id, code, message);
      log->error("failed: {} (exit {})", message, code);
      if (auto now = queue_.item(item.id)) {
        // Its finished chunks serve no retry now.
        if (!now->output.empty()) remove_work_folder(staging_path(now->output, item.id));
        dispose_failed(queue_, *now, entry, taken_ ? &*taken_ : nullptr);
      }
    }
  }
}

void Worker::process(const Item& item, const WatchEntry& entry, const WatchSpec& spec) {
  auto log = log::get("watch");
  struct ClearLive {
    Worker& w;
    ~ClearLive() {
      std::lock_guard<std::mutex> lock(w.live_mutex_);
      w.live_.reset();
    }
  } clear_live{*this};

  // 1. Still the version that settled, and a file the entry may take?
  taken_.reset();
  struct stat st {};
  const bool present = ::stat(item.input.c_str(), &st) == 0;
  const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const bool finished_before = item.committing && !item.output.empty();
  // The file itself, when this run reads it (a finished run's was not seen).
  if (present && !finished_before) taken_ = SourceFile{st.st_dev, st.st_ino};
  std::string refused;
  if (!finished_before &&
      (!present || int64_t(st.st_size) != item.size || mtime_ns != item.mtime_ns ||
       !source_allowed(entry, item.input, &refused))) {
    if (!item.output.empty()) remove_work_folder(staging_path(item.output, item.id));
    queue_.remove(item.id);
    if (!refused.empty()) {
      log->info("{}: not taken: {}; dropped from the queue", item.input, refused);
    } else {
      log->info("{}: {} before it was processed; dropped from the queue", item.input,
                present ? "changed" : "gone");
    }
    return;
  }

  JobSpec job = entry.job;
  job.inputs = {item.input};
  job.input_lines = {entry.line};
  // max_parallel inputs at once are spread over the job's GPUs (watch/device_share.h).
  if (spec.max_parallel > 1) {
    std::vector<int> ids = job.device_ids;
    if (job.devices == "auto") {
      ids.clear();
      for (int i = 0; i < parallel::cuda_device_count(); ++i) ids.push_back(i);
    }
    if (job.devices != "cpu" && ids.size() > 1) {
      job.devices = "list";
      job.device_ids = worker_devices(ids, index_, spec.max_parallel);
    }
  }
  // Where it runs, as the page shows it: "cpu", "auto", or the GPUs of this worker.
  std::string devices = job.devices;
  if (job.devices == "list") {
    devices = "cuda:";
    for (size_t i = 0; i < job.device_ids.size(); ++i) {
      devices += (i ? "," : "") + std::to_string(job.device_ids[i]);
    }
  }
  const std::string output = output_for(entry, item.input);
  const std::string staging = staging_path(output, item.id);
  // Every claim past the version check is an attempt (a rerun after a kill, too).
  if (!finished_before) queue_.begin_attempt(item.id, output, devices);
  const bool replace = job.on_exists == OnExists::kOverwrite;

  auto commit = [&](int64_t frames, double seconds) {
    queue_.set_committing(item.id);
    rename_into_place(staging, output, replace);
    fs::fsync_path(fs::parent_dir(output));
    queue_.set_done(item.id, frames, seconds);
    log->info("done: {} -> {} ({} frames, {:.2f} s)", item.input, output, frames, seconds);
    if (auto now = queue_.item(item.id))
      dispose_done(queue_, *now, entry, taken_ ? &*taken_ : nullptr);
  };

  // 2. Work a killed run finished: renamed already, or complete under the staging name.
  if (finished_before && !exists(staging) && exists(output)) {
    remove_work_folder(staging);
    queue_.set_done(item.id, item.frames, item.seconds);
    log->info("done: {} -> {} (finished before a restart)", item.input, output);
    if (auto now = queue_.item(item.id)) dispose_done(queue_, *now, entry);
    return;
  }
  if (exists(staging)) {
    log->info("{}: its output was complete before a restart; committing it", item.input);
    remove_work_folder(staging);  // assembled: its chunks have served
    commit(item.frames, item.seconds);
    return;
  }
  if (exists(output) && job.on_exists != OnExists::kOverwrite) {
    if (job.on_exists == OnExists::kSkip) {
      queue_.set_done(item.id, 0, 0);
      queue_.set_disposed(item.id, item.input);  // not made by us: the source stays
      log->info("{}: exists, skipped (on_exists: skip)", output);
      return;
    }
    throw OutputError(output + ": output exists (set on_exists: overwrite or skip)",
                      kExitCantCreat);
  }
  fs::make_dirs(fs::parent_dir(output));
  if (::access(fs::parent_dir(output).c_str(), W_OK) != 0) {
    throw OutputError(fs::parent_dir(output) + ": output folder is not writable", kExitCantCreat);
  }

  // 3. Run the job.
  progress_.begin(item.input, 0);  // no frames of the previous file while this one opens
  {
    std::lock_guard<std::mutex> lock(live_mutex_);
    live_ = LiveItem{};
    live_->worker = index_;
    live_->id = item.id;
    live_->input = item.input;
    live_->output = output;
    live_->devices = devices;
    live_start_ = Clock::now();
    live_base_ = 0;
    live_total_ = 0;
    live_counting_ = true;
  }
  log->info("{}: started (attempt {}) -> {}", item.input, item.attempts + 1, output);
  const auto start = Clock::now();
  sched::RunOptions options;
  options.progress = sched::ProgressStyle::kNone;
  options.cancel = &cancel_;
  auto last_update = Clock::now();
  auto report_progress = [&](int64_t frames_written) {
    // The queue holds the progress for `wmbatch status` (another process), once a second.
    if (seconds_since(last_update) < 1.0) return;
    last_update = Clock::now();
    int64_t base = 0, total = 0;
    {
      std::lock_guard<std::mutex> lock(live_mutex_);
      base = live_base_;
      total = live_total_;
    }
    try {
      queue_.set_progress(item.id, base + frames_written,
                          total > 0 ? total : progress_.frames_total());
    } catch (const Error& e) {
      log->warn("{}", e.what());
    }
  };
  options.on_slice = [&](int64_t, int64_t frames_written) { report_progress(frames_written); };
  sched::ChunkRunners& runners = runners_for(entry, job);
  fs::remove_stale_temps(staging);  // a killed run's leftovers (only this item writes here)
  // A symbolic link planted at the work folder's name would take the journal and the segments
  // elsewhere: removed (the link itself, never what it leads to).
  const std::string work = sched::chunk_work_folder(staging);
  struct stat link {};
  if (::lstat(work.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) ::unlink(work.c_str());
  if (spec.chunk_frames <= 0) {
    const int64_t frames = runners.whole_runner().process(item.input, staging, options, progress_);
    commit(frames, seconds_since(start));
    return;
  }

  // In chunks, resumable (the work folder beside the staging name).
  sched::InputChunksOptions chunked;
  chunked.chunk_frames = spec.chunk_frames;
  chunked.cancel = &cancel_;
  bool started_one = false;
  chunked.on_chunk_start = [&](const sched::InputChunk& c) {
    started_one = true;
    queue_.chunk_started(item.id, c.first_frame, c.last_frame);
    std::lock_guard<std::mutex> lock(live_mutex_);
    live_base_ = c.first_frame;
    live_total_ = c.input_frames;
    live_counting_ = true;
  };
  chunked.on_slice = report_progress;
  chunked.on_chunk_done = [&](const sched::InputChunk& c, int64_t frames) {
    queue_.chunk_done(item.id, c.first_frame, c.last_frame, frames);
    int64_t done_frames = 0;
    {
      std::lock_guard<std::mutex> lock(live_mutex_);
      live_total_ = c.input_frames;
      if (live_) {
        ++live_->chunks_done;
        if (!started_one) live_->frames_resumed += frames;  // found done, before any work here
      }
      live_base_ = c.last_frame < 0 ? live_base_ + frames : c.last_frame + 1;
      live_counting_ = false;  // until the next chunk's frames
      done_frames = live_base_;
    }
    // A finished chunk is progress `wmbatch status` shows at once (not up to a second later,
    // nor never when chunks take less than the once-a-second slice updates' interval).
    try {
      queue_.set_progress(item.id, done_frames, c.input_frames);
    } catch (const Error& e) {
      log->warn("{}", e.what());
    }
  };
  const sched::InputChunksResult result =
      sched::run_input_chunks(runners, item.input, staging, chunked, progress_);
  if (!exists(staging)) {
    // on_exists: skip, or a chunk's check found the output done: nothing of ours to commit.
    throw Error(staging + ": the chunks were assembled, yet the file is missing", kExitSoftware);
  }
  commit(result.frames, seconds_since(start));
}

}  // namespace wm::watch
