#include "scheduler/farm_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>
#include <vector>

#include "scheduler/fingerprint.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/json_text.h"
#include "src/base/log.h"

namespace wm::sched::farm {

std::string farm_dir(const std::string& output) { return output + ".wmfarm"; }
std::string journal_path(const std::string& output) { return farm_dir(output) + "/journal.sqlite"; }

std::string extension_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

std::string segment_name(const ChunkRange& r, const std::string& ext) {
  char buf[64];
  if (r.last_frame < 0) {
    std::snprintf(buf, sizeof buf, "seg-%08" PRId64 "-end", r.first_frame);
  } else {
    std::snprintf(buf, sizeof buf, "seg-%08" PRId64 "-%08" PRId64, r.first_frame, r.last_frame);
  }
  return buf + ext;
}

bool is_tensor_file(const std::string& path) { return extension_of(path) == ".safetensors"; }

// The state saved after a chunk ending at `last_frame`, and its journal entry (a plan-cache row:
// the journal's schema stays): {"file", "size", "sequence"}.
std::string state_name(int64_t last_frame) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "state-%08" PRId64 ".safetensors", last_frame);
  return buf;
}
namespace {
std::string state_key(int64_t last_frame) {
  return "causal-state after " + std::to_string(last_frame);
}
}  // namespace

Fingerprint fingerprint(const JobSpec& job, const std::string& input) {
  const auto stamp = stamp_file(input);
  if (!stamp) throw InputError(input + ": " + std::strerror(errno), kExitNoInput);
  Fingerprint fp;
  fp.input = input;
  fp.size = stamp->size;
  fp.mtime_ns = stamp->mtime_ns;
  fp.settings = stable_hash(job_settings_text(job));
  return fp;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log::get("farm")->warn("{}: cannot remove: {}", path, std::strerror(errno));
  }
}

void remove_farm_dir(const std::string& output) {
  const std::string dir = farm_dir(output);
  if (!stamp_file(dir)) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) log::get("farm")->warn("{}: cannot remove: {}", dir, ec.message());
}

FileLock::FileLock(const std::string& path, const std::string& what,
                   const std::atomic<bool>* cancel) {
  fd_ = fs::open_lock_file(path);  // a symbolic link there is removed, never followed
  if (fd_ < 0) {
    throw OutputError(path + ": cannot create lock file: " + std::strerror(errno), kExitCantCreat);
  }
  bool told = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      const int err = errno;
      ::close(fd_);
      throw OutputError(path + ": cannot lock: " + std::strerror(err), kExitIoErr);
    }
    if (!told) {
      log::get("farm")->info("{}: another process is working on it; waiting", what);
      told = true;
    }
    if (cancel && cancel->load()) {
      ::close(fd_);
      throw Cancelled(what + ": interrupted while waiting for another process");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

namespace {

// The output an assembly is about to rename into place, recorded (as a plan-cache entry, so the
// journal's schema stays) before the rename: a run killed after the rename but before its
// output row still finds the file to be its own.
const char* const kCommittingKey = "output-committing 1";

std::optional<OutputRecord> committing(Journal& journal) {
  try {
    const auto text = journal.plan(kCommittingKey);
    if (!text) return std::nullopt;
    const auto j = json_parse(*text);
    OutputRecord out;
    out.fingerprint.input = j.at("input").get<std::string>();
    out.fingerprint.size = j.at("input_size").get<int64_t>();
    out.fingerprint.mtime_ns = j.at("input_mtime_ns").get<int64_t>();
    out.fingerprint.settings = j.at("settings").get<std::string>();
    out.frames = j.at("frames").get<int64_t>();
    out.size = j.at("size").get<int64_t>();
    out.mtime_ns = j.at("mtime_ns").get<int64_t>();
    return out;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not ours to trust
  }
}

}  // namespace

// Paths are bytes: json_dump/json_parse keep those that are not UTF-8.
void record_committing(Journal& journal, const OutputRecord& out) {
  const Fingerprint& fp = out.fingerprint;
  journal.put_plan(kCommittingKey, json_dump(nlohmann::json{{"input", fp.input},
                                                            {"input_size", fp.size},
                                                            {"input_mtime_ns", fp.mtime_ns},
                                                            {"settings", fp.settings},
                                                            {"frames", out.frames},
                                                            {"size", out.size},
                                                            {"mtime_ns", out.mtime_ns}}));
}

OutputState output_state(Journal* journal, const std::string& output, const Fingerprint& fp) {
  const auto stamp = stamp_file(output);
  if (!stamp) return OutputState::kAbsent;
  if (journal) {
    const auto same_file = [&](const OutputRecord& rec) {
      return rec.size == stamp->size && rec.mtime_ns == stamp->mtime_ns;
    };
    auto rec = journal->output();
    if (!rec || !same_file(*rec)) {
      // Renamed into place by a run that died before writing its output row: the file was
      // verified before the rename, so it is complete; finish that run's bookkeeping.
      if (auto pending = committing(*journal); pending && same_file(*pending)) {
        log::get("farm")->info("{}: recognised as the complete output of an interrupted assembly",
                               output);
        journal->put_output(*pending);
        rec = pending;
      }
    }
    if (rec && same_file(*rec)) {
      return rec->fingerprint == fp ? OutputState::kDone : OutputState::kOursStale;
    }
  }
  return OutputState::kForeign;
}

bool segment_intact(const std::string& dir, const ChunkRecord& rec) {
  const auto stamp = stamp_file(dir + "/" + rec.segment);
  return stamp && stamp->size == rec.segment_size && stamp->mtime_ns == rec.segment_mtime_ns;
}

bool output_needs_work(const JobSpec& job, Journal* journal, const std::string& output,
                       const Fingerprint& fp, const std::string& label) {
  auto log = log::get("farm");
  switch (output_state(journal, output, fp)) {
    case OutputState::kDone:
      log->info("{}: already done ({} is assembled)", label, output);
      return false;
    case OutputState::kForeign:
      if (job.on_exists == OnExists::kSkip) {
        log->info("{}: {} exists, skipped", label, output);
        return false;
      }
      if (job.on_exists == OnExists::kFail) {
        throw OutputError(output + ": output exists (set on_exists: overwrite or skip)",
                          kExitCantCreat);
      }
      return true;
    case OutputState::kOursStale:  // made by an earlier farm run from another input/settings
    case OutputState::kAbsent:
      return true;
  }
  return true;
}

namespace {

std::optional<StateRecord> state_record(Journal& journal, int64_t last_frame) {
  try {
    const auto text = journal.plan(state_key(last_frame));
    if (!text || text->empty()) return std::nullopt;
    const auto j = json_parse(*text);
    StateRecord r{j.at("file").get<std::string>(), j.at("size").get<int64_t>(),
                  j.at("sequence").get<std::string>()};
    if (r.file.empty() || r.file.find('/') != std::string::npos) return std::nullopt;
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not ours to trust: the prefix is recomputed
  }
}

}  // namespace

void put_state_record(Journal& journal, int64_t last_frame, const StateRecord& r) {
  journal.put_plan(state_key(last_frame),
                   r.file.empty()
                       ? std::string()
                       : json_dump(nlohmann::json{
                             {"file", r.file}, {"size", r.size}, {"sequence", r.sequence}}));
}

std::optional<std::pair<int64_t, StateRecord>> newest_state(Journal& journal,
                                                            const std::string& dir,
                                                            const std::string& sequence,
                                                            int64_t before) {
  std::vector<int64_t> lasts;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    long long last = -1;
    char tail = 0;
    const std::string name = e.path().filename();
    if (std::sscanf(name.c_str(), "state-%lld.safetensor%c", &last, &tail) == 2 && tail == 's' &&
        last >= 0 && last < before && name == state_name(last)) {
      lasts.push_back(last);
    }
  }
  std::sort(lasts.rbegin(), lasts.rend());
  for (int64_t last : lasts) {
    auto r = state_record(journal, last);
    if (r && r->sequence == sequence && r->file == state_name(last)) return std::pair{last, *r};
  }
  return std::nullopt;
}

void remove_states(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("state-", 0) == 0) remove_file(e.path());
  }
}

}  // namespace wm::sched::farm
