// JSON text for values whose strings may hold any bytes. File names on Linux are bytes, not
// UTF-8 ("caf\xe9.mp4" from a Latin-1 system), and nlohmann::json::dump throws (type_error 316)
// on a string that is not valid UTF-8: every JSON that carries a path (the --report file, a farm
// plan, the farm journal's records, the watch daemon's status) is written through json_dump.
//
// The escape is Python's "surrogateescape", the one its os.fsdecode uses for file names: each
// byte that is not part of valid UTF-8 is written as the escape \udcXX (0x80 <= XX <= 0xff, a
// lone low surrogate), everything else exactly as nlohmann::json::dump writes it. So valid UTF-8
// text is unchanged, and the bytes come back exactly:
//   Python:  os.fsencode(json.load(f)["input"])        (json.loads reads lone surrogates)
//   C++:     json_parse(text)                          (nlohmann's parser refuses them)
// Thread-safe (pure functions).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace wm {

// value.dump(indent), but strings (values and keys) may hold any bytes: bytes that are not valid
// UTF-8 are written as \udcXX. Never throws for a string's content.
std::string json_dump(const nlohmann::json& value, int indent = -1);

// Parses JSON text, reading \udcXX escapes that are not part of a surrogate pair as the byte XX
// (what json_dump wrote); otherwise as nlohmann::json::parse (throws nlohmann::json::exception).
nlohmann::json json_parse(const std::string& text);

// True when `text` is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
bool valid_utf8(const std::string& text);

}  // namespace wm
