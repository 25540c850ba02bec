// Parsing of the HTTP/1.x requests the status page answers (watch/status_server.h): the request
// line and the header lines of a GET or POST, from bytes any client may send. Strict where a
// mistake could mislead (a bare CR, a folded header line, a space in a header name). The body of
// a POST (its Content-Length) is read by the server; the connection closes after one answer.
// A pure function, driven directly by the fuzz harness tests/fuzz/fuzz_http_request.cpp.
// Thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wm::watch {

struct HttpRequest {
  std::string method;     // a token: "GET", "HEAD", ...
  std::string target;     // as sent: "/api/status?pretty", "http://host:8611/metrics"
  std::string path;       // the target's path, without the query: "/api/status"; "*" for "*"
  int version_minor = 1;  // HTTP/1.<minor>
  // The header lines in order: names in lower case, values without the spaces around them.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // filled in by the server (watch/status_server.cpp), not by the parser
};

// The values of the header `name` (lower case) in `request`, in order.
std::vector<std::string> header_values(const HttpRequest& request, std::string_view name);

// "a=1&b=x%20y" (a query or an application/x-www-form-urlencoded body) as name/value pairs,
// percent-escapes and '+' decoded.
std::vector<std::pair<std::string, std::string>> parse_form(std::string_view text);

enum class HttpParse {
  kIncomplete,  // no empty line ending the head yet: read more
  kDone,        // a whole request head: `request` filled in, `head_size` its bytes
  kBad,         // not an HTTP/1.x request head: answer 400 and close
  kTooLarge,    // no end of the head within max_head bytes: answer 431 and close
};

// Parses the request head at the start of `data`: the request line "METHOD SP target SP
// HTTP/1.x", header lines "name: value", an empty line. Lines end with CRLF or LF. Reads nothing
// past `data`, and no more than max_head bytes of it; linear in that.
HttpParse parse_http_request(std::string_view data, size_t max_head, HttpRequest& request,
                             size_t* head_size = nullptr);

// Where the head of a request ends in `data`, given that no end was in its first `from` bytes
// (for a reader that appends what arrives: each byte is looked at once or twice); npos when not
// there yet. The end is the empty line's last byte, plus one: for a head parse_http_request
// accepts, its head_size.
size_t http_head_end(std::string_view data, size_t from);

}  // namespace wm::watch
