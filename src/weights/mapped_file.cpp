#include "src/weights/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "src/base/error.h"
#include "src/base/fs.h"

namespace wm::io {

MappedFile::MappedFile(const std::string& path) {
  uint64_t file_size = 0;
  const int fd = fs::open_regular_file(path, &file_size);  // a FIFO is refused, not waited on
  if (file_size == 0) {
    ::close(fd);
    return;
  }
  void* map = ::mmap(nullptr, size_t(file_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping stays
  if (map == MAP_FAILED) {
    throw InputError(path + ": cannot map: " + std::strerror(error), kExitNoInput);
  }
  map_ = map;
  size_ = size_t(file_size);
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, size_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace wm::io
