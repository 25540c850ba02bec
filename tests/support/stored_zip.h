// A zip of stored (uncompressed) entries, as torch.save writes its checkpoints, built in memory:
// for the torch.save reader's tests and its fuzz harness (header-only: the harness links no test
// support). No CRCs (the reader does not check them); `method` is written into every entry's
// headers as given (8 says "deflated" without compressing anything).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wm::test {

inline void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
}

inline std::string stored_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                              int method = 0) {
  std::string out, dir;
  for (const auto& [name, data] : entries) {
    const size_t offset = out.size();
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2), put_le(out, 0, 2), put_le(out, uint64_t(method), 2);
    put_le(out, 0, 4), put_le(out, 0, 4);
    put_le(out, data.size(), 4), put_le(out, data.size(), 4);
    put_le(out, name.size(), 2), put_le(out, 0, 2);
    out += name + data;
    put_le(dir, 0x02014b50, 4);
    put_le(dir, 20, 2), put_le(dir, 20, 2), put_le(dir, 0, 2), put_le(dir, uint64_t(method), 2);
    put_le(dir, 0, 4), put_le(dir, 0, 4), put_le(dir, data.size(), 4), put_le(dir, data.size(), 4);
    put_le(dir, name.size(), 2), put_le(dir, 0, 2), put_le(dir, 0, 2), put_le(dir, 0, 2);
    put_le(dir, 0, 2), put_le(dir, 0, 4), put_le(dir, offset, 4);
    dir += name;
  }
  const size_t dir_offset = out.size();
  out += dir;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2), put_le(out, 0, 2), put_le(out, entries.size(), 2);
  put_le(out, entries.size(), 2);
  put_le(out, dir.size(), 4), put_le(out, dir_offset, 4), put_le(out, 0, 2);
  return out;
}

}  // namespace wm::test
