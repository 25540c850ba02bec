// A regular file mapped read-only, as the weight-file readers hold it: the tensors they hand out
// point into the mapping, which lives as long as its MappedFile (moves keep the address).
//
// Errors: what fs::open_regular_file throws (missing, unreadable, a FIFO or a folder: never waited
// on) and "PATH: cannot map: <why>", all InputError(kExitNoInput). An empty file is not mapped:
// data() is null and size() 0, for the reader to refuse in its own words.
#pragma once

#include <cstddef>
#include <string>

namespace wm::io {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t size_ = 0;
};

}  // namespace wm::io
