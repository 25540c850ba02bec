// src/weights/safetensors: round trip through the writer and reader, and clear errors (never a
// crash) for missing, truncated and malformed files.
#include "src/weights/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/base/fs.h"

namespace fs = std::filesystem;
using wm::io::SafetensorsFile;
using wm::io::TensorEntry;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("wm_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Writes raw bytes: an 8-byte little-endian length (`declared_len`, or the header's size), the
  // header text, then `data`.
  std::string write_raw(const std::string& name, const std::string& header,
                        const std::string& data = "",
                        std::optional<uint64_t> declared_len = std::nullopt) const {
    const std::string path = file(name);
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = declared_len.value_or(header.size());
    for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
    out << header << data;
    return path;
  }

  // Opens `path` expecting an InputError; returns its message after checking the exit code.
  static std::string open_error(const std::string& path, int exit_code = wm::kExitDataErr) {
    try {
      SafetensorsFile f(path);
    } catch (const wm::InputError& e) {
      EXPECT_EQ(e.exit_code(), exit_code) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << path << ": opened without an error";
    return "";
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTrip) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<int64_t> b = {-1, 1LL << 40, 7};
  const uint8_t c = 200;
  const std::string path = file("round.safetensors");
  wm::io::write_safetensors(
      path,
      {TensorEntry{"z.a", "F32", {2, 3}, a.data(), a.size() * sizeof(float)},
       TensorEntry{"b", "I64", {3}, b.data(), b.size() * sizeof(int64_t)},
       TensorEntry{"c", "U8", {}, &c, 1}, TensorEntry{"empty", "F32", {0, 4}, nullptr, 0}},
      {{"format", "pt"}, {"note", "x y"}});
  EXPECT_FALSE(fs::exists(::wm::fs::temp_path_for(path)));

  SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "c", "empty", "z.a"}));
  EXPECT_TRUE(f.has("z.a"));
  EXPECT_FALSE(f.has("format"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x y");

  const auto& ia = f.info("z.a");
  EXPECT_EQ(ia.dtype, "F32");
  EXPECT_EQ(ia.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(ia.bytes, a.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(ia.data, a.data(), ia.bytes), 0);
  const auto& ib = f.info("b");
  ASSERT_EQ(ib.bytes, 24u);
  EXPECT_EQ(std::memcmp(ib.data, b.data(), ib.bytes), 0);
  EXPECT_TRUE(f.info("c").shape.empty());
  EXPECT_EQ(*static_cast<const uint8_t*>(f.info("c").data), 200);
  EXPECT_EQ(f.info("empty").bytes, 0u);

  // The header is padded so the data area starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(in.get())) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(fs::file_size(path), 8 + n + 24 + 24 + 1);

  EXPECT_THROW(f.info("nope"), wm::InputError);

  // Move keeps the mapping valid.
  SafetensorsFile g(std::move(f));
  EXPECT_EQ(std::memcmp(g.info("z.a").data, a.data(), a.size() * sizeof(float)), 0);
}

TEST_F(SafetensorsTest, OverwriteIsAtomicRename) {
  const std::string path = file("w.safetensors");
  const float one = 1.f, two = 2.f;
  wm::io::write_safetensors(path, {TensorEntry{"x", "F32", {1}, &one, 4}});
  wm::io::write_safetensors(path, {TensorEntry{"x", "F32", {1}, &two, 4}});
  SafetensorsFile f(path);
  EXPECT_EQ(*static_cast<const float*>(f.info("x").data), 2.f);
  EXPECT_FALSE(fs::exists(::wm::fs::temp_path_for(path)));
}

// The hook before the rename (a journal entry) sees the whole file at the process's one temp name,
// the name remove_stale_temps clears after a kill; a hook that throws leaves neither file.
TEST_F(SafetensorsTest, BeforeRenameSeesTheWholeTempFileAndAThrowLeavesNothing) {
  const std::string path = file("hooked.safetensors");
  const float v[3] = {1.f, 2.f, 3.f};
  std::string seen;
  wm::io::write_safetensors(path, {TensorEntry{"x", "F32", {3}, v, sizeof v}}, {},
                            [&](const std::string& temp) {
                              seen = temp;
                              EXPECT_FALSE(fs::exists(path));
                              SafetensorsFile partial(temp);
                              EXPECT_EQ(std::memcmp(partial.info("x").data, v, sizeof v), 0);
                            });
  EXPECT_EQ(seen, ::wm::fs::temp_path_for(path));
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(seen));

  const std::string refused = file("refused.safetensors");
  EXPECT_THROW(
      wm::io::write_safetensors(refused, {TensorEntry{"x", "F32", {3}, v, sizeof v}}, {},
                                [](const std::string&) { throw wm::OutputError("no journal"); }),
      wm::Error);
  EXPECT_FALSE(fs::exists(refused));
  EXPECT_FALSE(fs::exists(::wm::fs::temp_path_for(refused)));
}

TEST_F(SafetensorsTest, WriterRejectsBadEntries) {
  const float v[2] = {1, 2};
  const std::string path = file("bad.safetensors");
  EXPECT_THROW(wm::io::write_safetensors(path, {TensorEntry{"x", "F32", {3}, v, 8}}),
               wm::InputError);
  EXPECT_THROW(wm::io::write_safetensors(path, {TensorEntry{"x", "Q7", {2}, v, 8}}),
               wm::InputError);
  EXPECT_THROW(wm::io::write_safetensors(
                   path, {TensorEntry{"x", "F32", {2}, v, 8}, TensorEntry{"x", "F32", {2}, v, 8}}),
               wm::InputError);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(wm::io::write_safetensors(file("no/such/dir/x.safetensors"),
                                         {TensorEntry{"x", "F32", {2}, v, 8}}),
               wm::OutputError);
}

TEST_F(SafetensorsTest, MissingFile) {
  const std::string msg = open_error(file("absent.safetensors"), wm::kExitNoInput);
  EXPECT_NE(msg.find("absent.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, TooShortForLength) {
  const std::string path = file("short.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_NE(open_error(path).find("less than the 8-byte header length"), std::string::npos);
  std::ofstream(file("empty.safetensors"), std::ios::binary).flush();
  EXPECT_NE(open_error(file("empty.safetensors")).find("malformed safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedData) {
  const std::vector<float> a(16, 1.f);
  const std::string path = file("trunc.safetensors");
  wm::io::write_safetensors(path, {TensorEntry{"a", "F32", {16}, a.data(), 64}});
  fs::resize_file(path, fs::file_size(path) - 10);
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find("trunc.safetensors: malformed safetensors: tensor 'a'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("past the end of the data area"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, HeaderLengthHuge) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string msg = open_error(write_raw("huge.safetensors", h, "abcd", uint64_t(1) << 62));
  EXPECT_NE(msg.find("header length 4611686018427387904 exceeds the file"), std::string::npos)
      << msg;
  // All bits set: must not wrap around in the bounds check.
  const std::string msg2 = open_error(write_raw("huge2.safetensors", h, "abcd", ~uint64_t(0)));
  EXPECT_NE(msg2.find("exceeds the file"), std::string::npos) << msg2;
}

TEST_F(SafetensorsTest, BadJson) {
  const std::string msg = open_error(write_raw("json.safetensors", "{\"a\": [1,\n2"));
  EXPECT_NE(msg.find("header is not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(open_error(write_raw("arr.safetensors", "[1,2]")).find("not a JSON object"),
            std::string::npos);
}

TEST_F(SafetensorsTest, OffsetsPastEnd) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::string msg = open_error(write_raw("off.safetensors", h, "12345678"));
  EXPECT_NE(msg.find("data_offsets [4, 12] past the end of the data area (8 bytes)"),
            std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, MalformedEntries) {
  struct Case {
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "unknown dtype 'F33'"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
       "F32 [3] needs 12 bytes, data_offsets span 8"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", "non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", "begin > end"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", "missing 'data_offsets'"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "missing string 'dtype'"},
      {R"({"a":3})", "entry is not an object"},
      {R"({"__metadata__":{"k":1}})", "__metadata__.k is not a string"},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
       "shape too large"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string msg =
        open_error(write_raw("case" + std::to_string(i++) + ".safetensors", c.header, "12345678"));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " → " << msg;
  }
}

TEST_F(SafetensorsTest, RefusesOverlappingTensors) {
  // "b" reuses the last 4 bytes of "a": once accepted, so a write through one changed the other.
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::string msg = open_error(write_raw("overlap.safetensors", h, "123456789abc"));
  EXPECT_NE(msg.find("tensors 'a' [0, 8] and 'b' [4, 12] share bytes"), std::string::npos) << msg;
  // The same range twice, and one inside another, are refused; touching ranges and empty
  // tensors anywhere are fine.
  const std::string twice = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("z":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  EXPECT_NE(open_error(write_raw("twice.safetensors", twice, "1234")).find("share bytes"),
            std::string::npos);
  const std::string inside = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
  EXPECT_NE(open_error(write_raw("inside.safetensors", inside, "12345678")).find("share bytes"),
            std::string::npos);
  const std::string fine = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                           R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})";
  const SafetensorsFile f(write_raw("fine.safetensors", fine, "12345678"));
  EXPECT_EQ(f.names().size(), 3u);
}

TEST_F(SafetensorsTest, ErrorsQuoteLongNamesShortly) {
  const std::string name(100000, 'n');
  const std::string h = R"({")" + name + R"(":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})";
  const std::string msg = open_error(write_raw("long.safetensors", h, "1234"));
  EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
  EXPECT_NE(msg.find("... (100000 bytes)': unknown dtype 'F33'"), std::string::npos) << msg;
}

}  // namespace
