// Parsing of the HTTP/1.x requests the status page answers (watch/status_server.h): the request
// line and the header lines of a GET, from bytes any local client may send. Strict where a
// mistake could mislead (a bare CR, a folded header line, a space in a header name) and blind to
// what the page does not use (header values, a body: the connection closes after one answer).
// A pure function, driven directly by the fuzz harness tests/fuzz/fuzz_http_request.cpp.
// Thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace wm::watch {

struct HttpRequest {
  std::string method;     // a token: "GET", "HEAD", ...
  std::string target;     // as sent: "/api/status?pretty", "http://host:8611/metrics"
  std::string path;       // the target's path, without the query: "/api/status"; "*" for "*"
  int version_minor = 1;  // HTTP/1.<minor>
};

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
