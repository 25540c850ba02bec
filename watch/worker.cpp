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

// Moves a source into `folder`, keeping its path below the watched folder. Across file systems
// it is copied, fsynced and then removed. Returns the new path.
std::string move_source(const std::string& source, const WatchEntry& entry,
                        const std::string& folder) {
  std::string relative = stdfs::path(source).lexically_relative(entry.folder).string();
  if (relative.empty() || relative.compare(0, 2, "..") == 0) relative = base_name(source);
  const std::string target = free_name(folder, relative);
  fs::make_dirs(fs::parent_dir(target));
  if (::rename(source.c_str(), target.c_str()) != 0) {
    if (errno != EXDEV) {
      throw OutputError(source + ": cannot move to " + target + ": " + std::strerror(errno),
                        kExitIoErr);
    }
    std::error_code ec;
    stdfs::copy_file(source, target, ec);
    if (ec) {
      throw OutputError(source + ": cannot copy to " + target + ": " + ec.message(), kExitIoErr);
    }
    fs::fsync_path(target);
    ::unlink(source.c_str());
  }
  fs::fsync_path(fs::parent_dir(target));
  return target;
}

// Exit codes of failures that will not pass by retrying (bad or missing input).
bool retryable(int exit_code) { return exit_code != kExitDataErr && exit_code != kExitNoInput; }

}  // namespace

void dispose_done(Queue& queue, const Item& item, const WatchEntry& entry) {
  auto log = log::get("watch");
  try {
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

void dispose_failed(Queue& queue, const Item& item, const WatchEntry& entry) {
  auto log = log::get("watch");
  std::string now_at = item.input;
  try {
    if (!entry.failed_folder.empty() && exists(item.input)) {
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
    const int code = err ? err->exit_code() : int(kExitSoftware);
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
        dispose_failed(queue_, *now, entry);
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

  // 1. Still the version that settled?
  const auto stamp = sched::stamp_file(item.input);
  const bool finished_before = item.committing && !item.output.empty();
  if (!finished_before &&
      (!stamp || stamp->size != item.size || stamp->mtime_ns != item.mtime_ns)) {
    if (!item.output.empty()) remove_work_folder(staging_path(item.output, item.id));
    queue_.remove(item.id);
    log->info("{}: {} before it was processed; dropped from the queue", item.input,
              stamp ? "changed" : "gone");
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
  const std::string output = expand_output(job.output, item.input, job.name, job.dir);
  const std::string staging = staging_path(output, item.id);
  // Every claim past the version check is an attempt (a rerun after a kill, too).
  if (!finished_before) queue_.begin_attempt(item.id, output);
  const bool replace = job.on_exists == OnExists::kOverwrite;

  auto commit = [&](int64_t frames, double seconds) {
    queue_.set_committing(item.id);
    rename_into_place(staging, output, replace);
    fs::fsync_path(fs::parent_dir(output));
    queue_.set_done(item.id, frames, seconds);
    log->info("done: {} -> {} ({} frames, {:.2f} s)", item.input, output, frames, seconds);
    if (auto now = queue_.item(item.id)) dispose_done(queue_, *now, entry);
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
    live_ = LiveItem{index_, item.id, item.input, output, 0, 0, 0};
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
  if (spec.chunk_frames <= 0) {
    const int64_t frames =
        runners.get(/*whole=*/true).process(item.input, staging, options, progress_);
    commit(frames, seconds_since(start));
    return;
  }

  // In chunks, resumable (the work folder beside the staging name).
  sched::FarmOptions chunked;
  chunked.chunk_frames = spec.chunk_frames;
  chunked.progress = sched::ProgressStyle::kNone;
  chunked.cancel = &cancel_;
  bool started_one = false;
  chunked.on_chunk_start = [&](const sched::Chunk& c) {
    started_one = true;
    queue_.chunk_started(item.id, c.range.first_frame, c.range.last_frame);
    std::lock_guard<std::mutex> lock(live_mutex_);
    live_base_ = c.range.first_frame;
    live_total_ = c.input_frames;
    live_counting_ = true;
  };
  chunked.on_slice = report_progress;
  chunked.on_chunk_done = [&](const sched::Chunk& c, int64_t frames) {
    queue_.chunk_done(item.id, c.range.first_frame, c.range.last_frame, frames);
    int64_t done_frames = 0;
    {
      std::lock_guard<std::mutex> lock(live_mutex_);
      live_total_ = c.input_frames;
      if (live_) {
        ++live_->chunks_done;
        if (!started_one) live_->frames_resumed += frames;  // found done, before any work here
      }
      live_base_ = c.range.last_frame < 0 ? live_base_ + frames : c.range.last_frame + 1;
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
