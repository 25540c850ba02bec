// Small filesystem helpers shared by every folder: atomic writes and path checks.
#pragma once

#include <string>

namespace wm::fs {

// Writes `content` to "<path>.partial", fsyncs it, renames it over `path` and fsyncs the
// folder, so `path` holds either its old content or the whole new one. Throws OutputError.
void write_file_atomic(const std::string& path, const std::string& content);

// fsyncs an existing file or folder; throws OutputError naming it.
void fsync_path(const std::string& path);

// True when both paths name the same existing file (same device and inode).
bool same_file(const std::string& a, const std::string& b);

// Creates `dir` and its parents; throws OutputError(kExitCantCreat) naming it.
void make_dirs(const std::string& dir);

// The folder of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace wm::fs
