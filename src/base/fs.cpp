#include "src/base/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "src/base/error.h"

namespace wm::fs {
namespace {

std::string errno_text() { return std::strerror(errno); }

int exit_code_for_errno(int err) {
  return (err == EACCES || err == EPERM || err == EROFS || err == ENOENT || err == ENOTDIR)
             ? kExitCantCreat
             : kExitIoErr;
}

}  // namespace

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw OutputError(path + ": cannot open for fsync: " + errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on folders (EINVAL); the data itself was synced already.
  if (rc != 0 && err != EINVAL) throw OutputError(path + ": fsync failed: " + std::strerror(err));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string temp = temp_path_for(path);
  const int fd = create_exclusive(temp);
  if (fd < 0) {
    const int err = errno;
    throw OutputError(path + ": cannot create: " + std::strerror(err), exit_code_for_errno(err));
  }
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      throw OutputError(path + ": write failed: " + std::strerror(err));
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw OutputError(path + ": fsync failed: " + std::strerror(err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw OutputError(path + ": rename failed: " + std::strerror(err));
  }
  fsync_path(parent_dir(path));
}

int create_exclusive(const std::string& path, int mode) {
  constexpr int kTries = 4;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          static_cast<mode_t>(mode));
    if (fd >= 0 || errno != EEXIST || attempt + 1 == kTries) return fd;
    // Not ours: removed (a link itself, not its target), then created afresh.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return -1;
  }
}

int open_lock_file(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    // ELOOP: a symbolic link at the name (O_NOFOLLOW), removed and never followed.
    if (fd >= 0 || errno != ELOOP || attempt == 3) return fd;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return -1;
  }
}

std::string descriptor_path(int fd, const std::string& path) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  struct stat by_fd {
  }, by_name{};
  // The magic link must lead to this very file (/proc is mounted, and it is ours).
  if (::fstat(fd, &by_fd) == 0 && ::stat(proc.c_str(), &by_name) == 0 &&
      by_fd.st_dev == by_name.st_dev && by_fd.st_ino == by_name.st_ino) {
    return proc;
  }
  return path;
}

std::string temp_path_for(const std::string& final_path) {
  return final_path + "." + std::to_string(::getpid()) + ".partial";
}

void remove_stale_temps(const std::string& final_path) {
  const std::filesystem::path path(final_path);
  const std::string name = path.filename().string();
  const std::string ours = std::filesystem::path(temp_path_for(final_path)).filename().string();
  std::error_code ec;
  std::filesystem::directory_iterator it(parent_dir(final_path), ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    if (entry == ours || entry.size() < name.size() + 8 ||
        entry.compare(0, name.size(), name) != 0 ||
        entry.compare(entry.size() - 8, 8, ".partial") != 0) {
      continue;
    }
    // What lies between: "" (the old shared name) or ".<pid>".
    const std::string middle = entry.substr(name.size(), entry.size() - 8 - name.size());
    const bool pid = middle.size() > 1 && middle[0] == '.' &&
                     middle.find_first_not_of("0123456789", 1) == std::string::npos;
    if (middle.empty() || pid) ::unlink(it->path().c_str());
  }
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw OutputError(dir + ": cannot create output folder: " + ec.message(), kExitCantCreat);
}

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

int open_regular_file(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw InputError(path + ": cannot open: " + errno_text(), kExitNoInput);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw InputError(path + ": cannot stat: " + why, kExitNoInput);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISDIR(st.st_mode)    ? "a folder"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    throw InputError(path + ": is " + what + ", not a regular file", kExitNoInput);
  }
  *size = uint64_t(st.st_size);
  return fd;
}

}  // namespace wm::fs
