// src/base/json_text.h: JSON of strings holding any bytes (file names that are not UTF-8), as
// nlohmann::json::dump writes valid UTF-8, and read back byte for byte.
#include "src/base/json_text.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace wm {
namespace {

using nlohmann::json;
using namespace std::string_literals;

TEST(JsonText, ValidTextIsWrittenAsNlohmannWritesIt) {
  const json v = {{"input", "clips/caf\xc3\xa9 \"1\"\\a\n\t\x01.mp4"},
                  {"frames", 81},
                  {"fps", 23.976},
                  {"empty_list", json::array()},
                  {"empty_map", json::object()},
                  {"dropped", {"audio", "subtitles"}},
                  {"nested", {{"a", nullptr}, {"b", true}, {"c", {1, 2.5, "x"}}}},
                  {"\xf0\x9f\x8e\xa5", -3}};
  for (int indent : {-1, 0, 2, 4}) EXPECT_EQ(json_dump(v, indent), v.dump(indent)) << indent;
  EXPECT_EQ(json_dump(json("plain")), "\"plain\"");
  EXPECT_EQ(json_dump(json(7)), "7");
}

TEST(JsonText, BytesThatAreNotUtf8AreSurrogateEscapes) {
  // Python: json.dumps(os.fsdecode(b"caf\xe9.mp4")) == '"caf\\udce9.mp4"'
  EXPECT_EQ(json_dump(json("caf\xe9.mp4")), R"("caf\udce9.mp4")");
  // Overlong, surrogate, truncated and out-of-range forms: every byte of them escaped.
  EXPECT_EQ(json_dump(json("\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xf4\x90\x80\x80|\xff")),
            R"("\udcc0\udcaf|\udced\udca0\udc80|\udce2\udc82|\udcf4\udc90\udc80\udc80|\udcff")");
  // Valid UTF-8 and JSON escapes around them stay as they were.
  EXPECT_EQ(json_dump(json("\xc3\xa9\xe9\"\n")), R"("é\udce9\"\n")");
  // Keys too.
  EXPECT_EQ(json_dump(json{{"k\xe9", "v\xe9"}}, 2), "{\n  \"k\\udce9\": \"v\\udce9\"\n}");
}

TEST(JsonText, ParseReadsTheBytesBack) {
  const std::string name = "dir/caf\xe9 \x80\xff\xc3\xa9\\udce9 \0x"s;
  const json v = {{"input", name}, {"list", {name, "ok"}}, {"k\xfe", 1}};
  const std::string text = json_dump(v, 2);
  EXPECT_FALSE(json::accept(text));  // why json_parse is needed
  const json back = json_parse(text);
  EXPECT_EQ(back.at("input").get<std::string>(), name);
  EXPECT_EQ(back.at("list").at(0).get<std::string>(), name);
  EXPECT_EQ(back.at("k\xfe").get<int>(), 1);
  EXPECT_EQ(back, v);
  // Surrogate pairs and other escapes are read as nlohmann reads them.
  EXPECT_EQ(json_parse(R"(["\ud83c\udfa5", "\u0000\u00e9", "a\\udce9"])"),
            json::parse(R"(["\ud83c\udfa5", "\u0000\u00e9", "a\\udce9"])"));
  EXPECT_THROW(json_parse(R"(["\udc00"])"), json::exception);  // not one json_dump writes
}

TEST(JsonText, AnyBytesRoundTrip) {
  std::mt19937 rng(25);
  for (int round = 0; round < 2000; ++round) {
    std::string s(size_t(rng() % 24), '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 ? rng() % 256 : "\\\"u0dcx\xc3"[rng() % 9]);
    const json v = {{"s", s}, {s, {s}}};
    const std::string text = json_dump(v, round % 2 ? 2 : -1);
    ASSERT_EQ(json_parse(text), v) << text;
    ASSERT_EQ(valid_utf8(text), true) << text;  // the JSON text itself is always valid UTF-8
    if (valid_utf8(s)) {
      ASSERT_EQ(text, v.dump(round % 2 ? 2 : -1));
    }
  }
}

}  // namespace
}  // namespace wm
