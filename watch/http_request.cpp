#include "watch/http_request.h"

#include <cstring>

namespace wm::watch {
namespace {

// RFC 9110 token characters (method and header names).
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!is_tchar(c)) return false;
  }
  return true;
}

// Visible ASCII and bytes >= 0x80 (which some clients send raw): no controls, no space.
bool is_target_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u > 0x20 && u != 0x7f;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

// The path of a request target: origin form "/p?q" → "/p"; absolute form "http://h/p?q" → "/p";
// "*" → "*". Empty when the target is none of these.
std::string target_path(std::string_view target) {
  if (target == "*") return "*";
  if (starts_with_nocase(target, "http://") || starts_with_nocase(target, "https://")) {
    const size_t authority = target.find("//") + 2;
    const size_t slash = target.find_first_of("/?#", authority);
    if (slash == std::string_view::npos || target[slash] != '/') return "/";
    target.remove_prefix(slash);
  }
  if (target.empty() || target.front() != '/') return "";
  return std::string(target.substr(0, target.find_first_of("?#")));
}

bool parse_request_line(std::string_view line, HttpRequest& request) {
  const size_t first = line.find(' ');
  if (first == std::string_view::npos) return false;
  const size_t second = line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos) {
    return false;
  }
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (!is_token(method) || target.empty()) return false;
  for (const char c : target) {
    if (!is_target_char(c)) return false;
  }
  if (version.size() != 8 || version.compare(0, 7, "HTTP/1.") != 0 || version[7] < '0' ||
      version[7] > '9') {
    return false;
  }
  const std::string path = target_path(target);
  if (path.empty()) return false;
  request.method = std::string(method);
  request.target = std::string(target);
  request.path = path;
  request.version_minor = version[7] - '0';
  return true;
}

// "Name: value" into the request's headers; false when it is not a header line.
bool parse_header_line(std::string_view line, HttpRequest& request) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return false;
  std::string_view value = line.substr(colon + 1);
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::string name(line.substr(0, colon));
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  request.headers.emplace_back(std::move(name), std::string(value));
  return true;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string form_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out += ' ';
    } else if (text[i] == '%' && i + 2 < text.size() && hex_digit(text[i + 1]) >= 0 &&
               hex_digit(text[i + 2]) >= 0) {
      out += char(hex_digit(text[i + 1]) * 16 + hex_digit(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

size_t http_head_end(std::string_view data, size_t from) {
  for (size_t i = from > 2 ? from - 2 : 0; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

std::vector<std::string> header_values(const HttpRequest& request, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& [n, v] : request.headers) {
    if (n == name) out.push_back(v);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_form(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const size_t amp = text.find('&');
    const std::string_view pair = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view() : text.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    out.emplace_back(form_decode(pair.substr(0, eq)),
                     eq == std::string_view::npos ? "" : form_decode(pair.substr(eq + 1)));
  }
  return out;
}

HttpParse parse_http_request(std::string_view data, size_t max_head, HttpRequest& request,
                             size_t* head_size) {
  request.headers.clear();
  if (data.size() > max_head) data = data.substr(0, max_head + 1);
  bool request_line = false;
  size_t pos = 0;
  for (;;) {
    const size_t newline = data.find('\n', pos);
    if (newline == std::string_view::npos || newline >= max_head) {
      return data.size() > max_head ? HttpParse::kTooLarge : HttpParse::kIncomplete;
    }
    std::string_view line = data.substr(pos, newline - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos) return HttpParse::kBad;  // a bare CR
    pos = newline + 1;
    if (line.empty()) {
      if (!request_line) return HttpParse::kBad;  // no request line
      if (head_size) *head_size = pos;
      return HttpParse::kDone;
    }
    if (!request_line) {
      if (!parse_request_line(line, request)) return HttpParse::kBad;
      request_line = true;
    } else if (line.front() == ' ' || line.front() == '\t' || !parse_header_line(line, request)) {
      return HttpParse::kBad;  // a folded line (obsolete) or no "name:"
    }
  }
}

}  // namespace wm::watch
