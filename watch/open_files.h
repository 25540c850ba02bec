// Which files a local process holds open for writing: a scan of /proc/*/fd (the files of every
// process this user may inspect; others' are invisible without privileges, so a copy by another
// user is judged by settling alone). Linux only.
#pragma once

#include <sys/types.h>

#include <set>
#include <utility>

namespace wm::watch {

using FileId = std::pair<dev_t, ino_t>;

// Those of `files` that some process other than this one has open with O_WRONLY or O_RDWR.
std::set<FileId> open_for_writing(const std::set<FileId>& files);

}  // namespace wm::watch
