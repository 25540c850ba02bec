#include "watch/detector.h"

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <set>
#include <tuple>

#include "src/base/log.h"
#include "watch/open_files.h"

namespace wm::watch {
namespace {

constexpr uint32_t kFileEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE;

struct Stat {
  bool ok = false;
  bool dir = false;
  bool file = false;
  int64_t size = 0, mtime_ns = 0;
  dev_t dev = 0;
  ino_t ino = 0;
};

Stat stat_path(const std::string& path) {
  struct stat st {};
  Stat s;
  if (::stat(path.c_str(), &st) != 0) return s;
  s.ok = true;
  s.dir = S_ISDIR(st.st_mode);
  s.file = S_ISREG(st.st_mode);
  s.size = int64_t(st.st_size);
  s.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  return s;
}

// Sub-folders a recursive entry does not descend into: hidden ones, and the done and failed
// folders of every entry.
bool skipped_folder(const WatchSpec& spec, const std::string& dir, const std::string& name) {
  if (name.empty() || name[0] == '.') return true;
  for (const WatchEntry& e : spec.entries) {
    if (dir == e.done_folder || dir == e.failed_folder) return true;
  }
  return false;
}

// The files (names not ignored) and the sub-folders (not skipped) of a folder.
struct Listing {
  std::vector<std::string> files, folders;
};

Listing list_folder(const WatchSpec& spec, const std::string& dir) {
  Listing out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    if (e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && stat_path(path).dir)) {
      if (!skipped_folder(spec, path, name)) out.folders.push_back(path);
    } else if (!is_ignored_name(name)) {
      out.files.push_back(path);
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

Detector::Detector(const WatchSpec& spec, KnownFn known) : spec_(spec), known_(std::move(known)) {
  fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) {
    log::get("watch")->warn("inotify unavailable ({}); finding files by rescans every {} s",
                            std::strerror(errno), spec.poll_seconds);
  }
  for (const WatchEntry& e : spec_.entries) add_watch(e.folder, e.recursive);
}

Detector::~Detector() {
  if (fd_ >= 0) ::close(fd_);
}

void Detector::add_watch(const std::string& dir, bool recursive) {
  if (fd_ >= 0) {
    const int wd = ::inotify_add_watch(fd_, dir.c_str(), kFileEvents | IN_ONLYDIR);
    if (wd < 0) {
      log::get("watch")->warn(
          "{}: cannot watch with inotify ({}); rescans every {} s find its files", dir,
          std::strerror(errno), spec_.poll_seconds);
    } else {
      watches_[wd] = dir;
    }
  }
  if (!recursive) return;
  for (const std::string& sub : list_folder(spec_, dir).folders) add_watch(sub, true);
}

void Detector::read_events() {
  if (fd_ < 0) return;
  alignas(inotify_event) char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return;  // EAGAIN: drained
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += ssize_t(sizeof(inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {
        log::get("watch")->warn("inotify queue overflowed; rescanning");
        rescan();
        continue;
      }
      if (ev->mask & IN_IGNORED) {
        watches_.erase(ev->wd);
        continue;
      }
      const auto it = watches_.find(ev->wd);
      if (it == watches_.end() || ev->len == 0) continue;
      const std::string name = ev->name;
      const std::string path = it->second + "/" + name;
      if (ev->mask & IN_ISDIR) {
        // A new folder below a recursive entry: watch it, then take what is already in it.
        for (const WatchEntry& e : spec_.entries) {
          if (e.recursive && (path.compare(0, e.folder.size() + 1, e.folder + "/") == 0) &&
              !skipped_folder(spec_, path, name)) {
            add_watch(path, true);
            std::vector<std::string> files;
            scan_folder(path, true, files);
            for (const std::string& f : files) consider(f);
            break;
          }
        }
        continue;
      }
      consider(path);
    }
  }
}

void Detector::scan_folder(const std::string& dir, bool recursive,
                           std::vector<std::string>& files) {
  const Listing listing = list_folder(spec_, dir);
  files.insert(files.end(), listing.files.begin(), listing.files.end());
  if (!recursive) return;
  for (const std::string& sub : listing.folders) scan_folder(sub, true, files);
}

void Detector::rescan() {
  std::vector<std::string> files;
  for (const WatchEntry& e : spec_.entries) scan_folder(e.folder, e.recursive, files);
  // Arrival order as far as a scan can tell: modification time, then name.
  std::vector<std::tuple<int64_t, std::string>> order;
  for (const std::string& f : files) {
    if (candidates_.count(f) || !entry_for(spec_, f)) continue;
    const Stat s = stat_path(f);
    if (s.ok && s.file) order.emplace_back(s.mtime_ns, f);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [mtime, path] : order) consider(path);
}

void Detector::consider(const std::string& path) {
  const WatchEntry* entry = entry_for(spec_, path);
  if (!entry) return;
  std::string why;
  if (!source_allowed(*entry, path, &why)) {
    candidates_.erase(path);
    if (refused_.insert(path).second) log::get("watch")->info("{}: not taken: {}", path, why);
    return;
  }
  refused_.erase(path);
  const Stat s = stat_path(path);
  if (!s.ok || !s.file) {
    candidates_.erase(path);
    return;
  }
  auto it = candidates_.find(path);
  if (it == candidates_.end()) {
    if (known_(path, s.size, s.mtime_ns, *entry)) return;
    Candidate c{entry, s.size, s.mtime_ns, Clock::now(), next_seq_++};
    candidates_.emplace(path, c);
    log::get("watch")->debug("{}: seen ({} bytes); waiting for it to settle", path, s.size);
    return;
  }
  if (it->second.size != s.size || it->second.mtime_ns != s.mtime_ns) {
    it->second.size = s.size;
    it->second.mtime_ns = s.mtime_ns;
    it->second.stable_since = Clock::now();
  }
}

std::vector<ReadyFile> Detector::take_ready() {
  const auto now = Clock::now();
  const auto settle = std::chrono::duration<double>(spec_.settle_seconds);
  std::map<FileId, std::string> settled;
  for (auto it = candidates_.begin(); it != candidates_.end();) {
    Candidate& c = it->second;
    const Stat s = stat_path(it->first);
    if (!s.ok || !s.file) {
      it = candidates_.erase(it);
      continue;
    }
    if (s.size != c.size || s.mtime_ns != c.mtime_ns) {
      c.size = s.size;
      c.mtime_ns = s.mtime_ns;
      c.stable_since = now;
    } else if (now - c.stable_since >= settle) {
      if (known_(it->first, s.size, s.mtime_ns, *c.entry)) {
        it = candidates_.erase(it);
        continue;
      }
      settled.emplace(FileId{s.dev, s.ino}, it->first);
    }
    ++it;
  }
  std::vector<ReadyFile> ready;
  if (settled.empty()) return ready;
  std::set<FileId> ids;
  for (const auto& [id, path] : settled) ids.insert(id);
  const std::set<FileId> writing = open_for_writing(ids);
  std::vector<std::pair<uint64_t, ReadyFile>> order;
  for (const auto& [id, path] : settled) {
    Candidate& c = candidates_.at(path);
    if (writing.count(id)) {
      log::get("watch")->debug("{}: still open for writing ({} bytes); waiting", path, c.size);
      c.stable_since = now;
      continue;
    }
    order.emplace_back(c.seq, ReadyFile{path, c.entry, c.size, c.mtime_ns});
    candidates_.erase(path);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, file] : order) ready.push_back(std::move(file));
  return ready;
}

}  // namespace wm::watch
