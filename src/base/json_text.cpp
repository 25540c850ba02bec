#include "src/base/json_text.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace wm {
namespace {

using nlohmann::json;

// The length of the valid UTF-8 sequence starting at s[i], or 0 when s[i] does not start one
// (RFC 3629, table 3-7 of the Unicode standard: what nlohmann's parser and dump accept).
size_t utf8_length(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // no overlong forms
    if (c == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xbf) return 0;
  }
  return n;
}

constexpr char kHex[] = "0123456789abcdef";

void dump_string(std::string& out, const std::string& s) {
  if (valid_utf8(s)) {
    out += json(s).dump();
    return;
  }
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    for (size_t n; i < s.size() && (n = utf8_length(s, i)) > 0;) i += n;
    if (i > start) {
      const std::string run = json(s.substr(start, i - start)).dump();
      out.append(run, 1, run.size() - 2);
    }
    if (i < s.size()) {
      const auto byte = static_cast<unsigned char>(s[i++]);
      out += "\\udc";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(size_t(indent) * size_t(level), ' ');
}

// As nlohmann's serializer lays values out: "{}" and "[]" when empty; with indent >= 0 one
// member per line and ": " after keys, else no spaces at all.
void dump_value(std::string& out, const json& v, int indent, int level) {
  if (v.is_string()) {
    dump_string(out, v.get_ref<const std::string&>());
    return;
  }
  if (!v.is_object() && !v.is_array()) {
    out += v.dump();
    return;
  }
  if (v.empty()) {
    out += v.is_object() ? "{}" : "[]";
    return;
  }
  out += v.is_object() ? '{' : '[';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ',';
    first = false;
    newline(out, indent, level + 1);
    if (v.is_object()) {
      dump_string(out, it.key());
      out += indent >= 0 ? ": " : ":";
    }
    dump_value(out, it.value(), indent, level + 1);
  }
  newline(out, indent, level);
  out += v.is_object() ? '}' : ']';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of the escape "\uXXXX" at text[i] (i at the backslash), or -1.
long escape_unit(const std::string& text, size_t i) {
  if (text.size() - i < 6 || text[i] != '\\' || text[i + 1] != 'u') return -1;
  long unit = 0;
  for (size_t k = 2; k < 6; ++k) {
    const int h = hex_value(text[i + k]);
    if (h < 0) return -1;
    unit = unit * 16 + h;
  }
  return unit;
}

// The text with what nlohmann's parser refuses made acceptable: a lone \udcXX (XX >= 0x80)
// becomes \u0000\u00XX and a real \u0000 becomes \u0000\u0000, which unmark() turns back (JSON
// text holds no raw NUL inside a string, so a NUL in a parsed string came from an escape).
std::string mark_escaped_bytes(const std::string& text, bool* marked) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) {
      in_string = c == '"';
      out += c;
      continue;
    }
    if (c == '"') {
      in_string = false;
      out += c;
      continue;
    }
    if (c != '\\' || i + 1 >= text.size()) {
      out += c;
      continue;
    }
    const long unit = escape_unit(text, i);
    if (unit >= 0xd800 && unit <= 0xdbff && escape_unit(text, i + 6) >= 0xdc00 &&
        escape_unit(text, i + 6) <= 0xdfff) {
      out.append(text, i, 12);  // a surrogate pair: one character
      i += 11;
    } else if (unit == 0) {
      out += "\\u0000\\u0000";
      *marked = true;
      i += 5;
    } else if (unit >= 0xdc80 && unit <= 0xdcff) {
      out += "\\u0000\\u00";
      out.append(text, i + 4, 2);
      *marked = true;
      i += 5;
    } else {
      out.append(text, i, 2);  // any other escape, kept whole ("\\" must not escape the next)
      ++i;
    }
  }
  return out;
}

std::string unmark(const std::string& s) {
  if (s.find('\0') == std::string::npos) return s;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\0' || i + 1 >= s.size()) {
      out += s[i];
    } else if (s[i + 1] == '\0') {
      out += '\0';
      ++i;
    } else if (i + 2 < s.size() && (s[i + 1] == '\xc2' || s[i + 1] == '\xc3')) {
      // U+0080..U+00FF in UTF-8: the byte 0x80..0xff
      const auto lead = static_cast<unsigned char>(s[i + 1]);
      const auto cont = static_cast<unsigned char>(s[i + 2]);
      out += static_cast<char>(((lead & 0x03) << 6) | (cont & 0x3f));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

json unmark_all(const json& v) {
  if (v.is_string()) return unmark(v.get_ref<const std::string&>());
  if (v.is_array()) {
    json out = json::array();
    for (const json& item : v) out.push_back(unmark_all(item));
    return out;
  }
  if (v.is_object()) {
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[unmark(it.key())] = unmark_all(it.value());
    return out;
  }
  return v;
}

}  // namespace

bool valid_utf8(const std::string& text) {
  for (size_t i = 0, n; i < text.size(); i += n) {
    n = utf8_length(text, i);
    if (n == 0) return false;
  }
  return true;
}

std::string json_dump(const json& value, int indent) {
  std::string out;
  dump_value(out, value, indent, 0);
  return out;
}

json json_parse(const std::string& text) {
  bool marked = false;
  const std::string acceptable = mark_escaped_bytes(text, &marked);
  json value = json::parse(acceptable);
  return marked ? unmark_all(value) : value;
}

}  // namespace wm
