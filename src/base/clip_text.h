// Long text quoted in an error line: a name read from a file (a tensor, a pickle global, a dict
// key) may be megabytes long, and an error is one short line (docs/exit-codes.md).
#pragma once

#include <cstddef>
#include <string>

namespace wm {

// `text` cut to at most `max` bytes (at a UTF-8 character boundary), with "... (N bytes)" after
// it when cut.
inline std::string clip(const std::string& text, size_t max = 160) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  return text.substr(0, end) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace wm
