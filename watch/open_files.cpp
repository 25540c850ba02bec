#include "watch/open_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace wm::watch {
namespace {

bool all_digits(const char* s) {
  if (!*s) return false;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return false;
  }
  return true;
}

// The open flags of one descriptor ("flags:\t0100001" in /proc/PID/fdinfo/FD, octal).
int fd_flags(const std::string& pid, const char* fd) {
  const std::string path = "/proc/" + pid + "/fdinfo/" + fd;
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return -1;
  char line[256];
  int flags = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "flags:", 6) == 0) {
      flags = int(std::strtol(line + 6, nullptr, 8));
      break;
    }
  }
  std::fclose(f);
  return flags;
}

}  // namespace

std::set<FileId> open_for_writing(const std::set<FileId>& files) {
  std::set<FileId> found;
  if (files.empty()) return found;
  const std::string self = std::to_string(::getpid());
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (const dirent* p = ::readdir(proc)) {
    if (!all_digits(p->d_name) || self == p->d_name) continue;
    const std::string pid = p->d_name;
    const std::string fd_dir = "/proc/" + pid + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (!fds) continue;  // gone, or another user's
    while (const dirent* f = ::readdir(fds)) {
      if (!all_digits(f->d_name)) continue;
      struct stat st {};
      // stat() follows the magic link to the open file itself, whatever its name now.
      if (::stat((fd_dir + "/" + f->d_name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const FileId id{st.st_dev, st.st_ino};
      if (!files.count(id) || found.count(id)) continue;
      const int flags = fd_flags(pid, f->d_name);
      if (flags >= 0 && (flags & O_ACCMODE) != O_RDONLY) found.insert(id);
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  return found;
}

}  // namespace wm::watch
