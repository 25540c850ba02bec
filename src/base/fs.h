// Small filesystem helpers shared by every folder: atomic writes and path checks.
#pragma once

#include <cstdint>
#include <string>

namespace wm::fs {

// The temp name a process writes `final_path` under before renaming it into place:
// "<final_path>.<pid>.partial", so two processes never share one temp file.
std::string temp_path_for(const std::string& final_path);

// Removes the temp files of `final_path` that other (killed) runs left: "<final>.partial" and
// "<final>.<pid>.partial" of any pid but ours. Call it only while holding the output's lock
// (io::OutputLock), when no other process may be writing one.
void remove_stale_temps(const std::string& final_path);

// Names a stranger may have chosen: temp files and lock files live in folders other users may
// write to (a watched drop folder, a shared output folder). They are never opened through a name
// someone else created: temp files are created exclusively (create_exclusive) and lock files are
// opened without following a symbolic link (open_lock_file), so a link planted at such a name
// never redirects a write to a file of its maker's choosing.
//
// Creates `path` as a new, empty file open for writing (O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|
// O_CLOEXEC). Whatever is at `path` already (a planted symbolic link, a file a killed process
// with our pid left) is removed first — unlink(2) removes a link, never what it points at — and
// the creation tried again, a few times. Returns the descriptor, or -1 with errno set (EEXIST
// when something kept reappearing, EISDIR for a folder, and what open(2) sets).
int create_exclusive(const std::string& path, int mode = 0644);

// Opens, creating it when missing, a lock file for flock(2) (O_RDWR|O_CREAT|O_NOFOLLOW|
// O_CLOEXEC): a symbolic link at `path` is removed, never followed. The descriptor, or -1 with
// errno set.
int open_lock_file(const std::string& path);

// A name that opens the file `fd` holds, for code that can only open files by name (libav's
// avio_open): "/proc/self/fd/<fd>", which reaches that file whatever lies at its old name now;
// `path` where /proc is not mounted.
std::string descriptor_path(int fd, const std::string& path);

// Writes `content` to temp_path_for(path) (created with create_exclusive), fsyncs it, renames it
// over `path` and fsyncs the folder, so `path` holds either its old content or the whole new one.
// Throws OutputError.
void write_file_atomic(const std::string& path, const std::string& content);

// fsyncs an existing file or folder; throws OutputError naming it.
void fsync_path(const std::string& path);

// True when both paths name the same existing file (same device and inode).
bool same_file(const std::string& a, const std::string& b);

// Creates `dir` and its parents; throws OutputError(kExitCantCreat) naming it.
void make_dirs(const std::string& dir);

// The folder of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

// Opens `path` read-only as a regular file and returns its descriptor (the caller closes it),
// with its size in `*size`. Does not wait on a FIFO (O_NONBLOCK: opening one for reading would
// block until a writer comes). Throws InputError(kExitNoInput): "PATH: cannot open: <why>", or
// "PATH: is a FIFO, not a regular file" (a folder, a socket, a device).
int open_regular_file(const std::string& path, uint64_t* size);

}  // namespace wm::fs
