// io/torch_pickle.h: the golden torch.save files of tests/data/golden/upscalers read as the
// safetensors copies of the same weights, and files that must be refused: truncated, foreign,
// compressed, and pickles that name code (os.system) or call what a state dict never calls.
#include "io/torch_pickle.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "src/base/error.h"
#include "tests/support/media.h"

namespace wm::io {
namespace {

using namespace std::string_literals;

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/upscalers/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += char((v >> (8 * i)) & 0xff);
}

// A zip of stored entries (no CRCs: the reader does not need them), or with `method` set on
// every entry's headers.
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                     int method = 0) {
  std::string out, dir;
  for (const auto& [name, data] : entries) {
    const size_t offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, method, 2), put(out, 0, 4), put(out, 0, 4);
    put(out, data.size(), 4), put(out, data.size(), 4);
    put(out, name.size(), 2), put(out, 0, 2);
    out += name + data;
    put(dir, 0x02014b50, 4);
    put(dir, 20, 2), put(dir, 20, 2), put(dir, 0, 2), put(dir, method, 2), put(dir, 0, 4);
    put(dir, 0, 4), put(dir, data.size(), 4), put(dir, data.size(), 4);
    put(dir, name.size(), 2), put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 2), put(dir, 0, 2);
    put(dir, 0, 4), put(dir, offset, 4);
    dir += name;
  }
  const size_t dir_offset = out.size();
  out += dir;
  put(out, 0x06054b50, 4);
  put(out, 0, 2), put(out, 0, 2), put(out, entries.size(), 2), put(out, entries.size(), 2);
  put(out, dir.size(), 4), put(out, dir_offset, 4), put(out, 0, 2);
  return out;
}

// A protocol-2 pickle of {'w': tensor(storage '0', offset, size (2,), stride (1,))}, with
// `storage_numel` elements in the storage entry.
std::string tensor_pickle(int offset, int size, int storage_numel) {
  std::string p = "\x80\x02}q\x00X\x01\x00\x00\x00w"s;
  p += "ctorch._utils\n_rebuild_tensor_v2\n(";
  p += "(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"s
       "0X\x03\x00\x00\x00"s
       "cpuK";
  p += char(storage_numel);
  p += "tQK";
  p += char(offset);
  p += "K";
  p += char(size);
  p += "\x85K\x01\x85\x89"
       "ccollections\nOrderedDict\n)Rtq\x01Rs.";
  return p;
}

std::string storage(int numel) {
  std::string s;
  for (int i = 0; i < numel; ++i) {
    const float v = float(i) + 0.5f;
    s.append(reinterpret_cast<const char*>(&v), 4);
  }
  return s;
}

std::string error_of(const std::string& path) {
  try {
    TorchCheckpoint c(path);
  } catch (const ModelError& e) {
    EXPECT_EQ(e.exit_code(), kExitDataErr);
    return e.what();
  }
  ADD_FAILURE() << path << " was read";
  return "";
}

class GoldenCheckpoint : public testing::TestWithParam<const char*> {};

TEST_P(GoldenCheckpoint, MatchesTheSafetensorsCopy) {
  const std::string dir = kGolden + GetParam() + "/";
  TorchCheckpoint ckpt(dir + "model.pth");
  SafetensorsFile st(dir + "weights.safetensors");
  const bool rrdb = std::string(GetParam()).rfind("rrdb", 0) == 0;
  const auto& dict = ckpt.dict(rrdb ? "params_ema" : "params");
  EXPECT_EQ(ckpt.top_level().at(rrdb ? "params_ema" : "params"), "dict");
  ASSERT_EQ(dict.size(), st.names().size());
  for (const std::string& name : st.names()) {
    const TensorInfo& want = st.info(name);
    ASSERT_TRUE(dict.count(name)) << name;
    const TorchTensor& got = dict.at(name);
    EXPECT_EQ(got.dtype, want.dtype) << name;
    EXPECT_EQ(got.shape, want.shape) << name;
    EXPECT_TRUE(got.contiguous()) << name;
    EXPECT_EQ(std::memcmp(got.data, want.data, want.bytes), 0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, GoldenCheckpoint,
                         testing::Values("srvgg-tiny", "srvgg-x2-tiny", "rrdb-tiny",
                                         "rrdb-x2-tiny"));

TEST(TorchCheckpoint, ReadsATensorAtItsOffset) {
  test::TempDir tmp("pickle");
  const std::string path = tmp.file("ok.pth");
  write_file(path, make_zip({{"archive/data.pkl", tensor_pickle(1, 2, 4)},
                             {"archive/data/0", storage(4)},
                             {"archive/version", "3\n"}}));
  TorchCheckpoint c(path);
  ASSERT_EQ(c.tensors().count("w"), 1u);
  const TorchTensor& t = c.tensors().at("w");
  EXPECT_EQ(t.shape, std::vector<int64_t>{2});
  float v[2];
  std::memcpy(v, t.data, 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], 2.5f);
}

TEST(TorchCheckpoint, RefusesTruncatedAndForeignFiles) {
  test::TempDir tmp("pickle");
  const std::string whole = read_file(kGolden + "srvgg-tiny/model.pth");
  write_file(tmp.file("half.pth"), whole.substr(0, whole.size() / 2));
  std::string e = error_of(tmp.file("half.pth"));
  EXPECT_NE(e.find(tmp.file("half.pth")), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  write_file(tmp.file("text.pth"), "this is not a checkpoint, just some text\n");
  e = error_of(tmp.file("text.pth"));
  EXPECT_NE(e.find("not a PyTorch checkpoint"), std::string::npos) << e;

  // A zip, but not torch.save's (no <name>/data.pkl).
  write_file(tmp.file("other.zip"), make_zip({{"readme.txt", "hello"}}));
  e = error_of(tmp.file("other.zip"));
  EXPECT_NE(e.find("data.pkl"), std::string::npos) << e;

  // The storage entry is shorter than the tensor says.
  write_file(tmp.file("short.pth"), make_zip({{"archive/data.pkl", tensor_pickle(3, 2, 4)},
                                              {"archive/data/0", storage(4)}}));
  e = error_of(tmp.file("short.pth"));
  EXPECT_NE(e.find("past its storage"), std::string::npos) << e;

  write_file(tmp.file("deflated.pth"),
             make_zip({{"archive/data.pkl", tensor_pickle(0, 2, 4)}}, /*method=*/8));
  e = error_of(tmp.file("deflated.pth"));
  EXPECT_NE(e.find("compressed"), std::string::npos) << e;

  EXPECT_THROW(TorchCheckpoint(tmp.file("missing.pth")), InputError);
}

TEST(TorchCheckpoint, RefusesPicklesThatNameCode) {
  test::TempDir tmp("pickle");
  // pickle.dumps(os.system('echo pwned')) at protocol 2, as a malicious .pth carries it.
  const std::string evil =
      "\x80\x02"
      "cos\nsystem\nq\x00X\x0a\x00\x00\x00touch abcd\x85R."s;
  write_file(tmp.file("evil.pth"), make_zip({{"archive/data.pkl", evil}}));
  std::string e = error_of(tmp.file("evil.pth"));
  EXPECT_NE(e.find("'os.system'"), std::string::npos) << e;
  EXPECT_NE(e.find("refused"), std::string::npos) << e;

  // STACK_GLOBAL (protocol 4) spelling of builtins.eval.
  const std::string eval =
      "\x80\x04\x8c\x08"
      "builtins\x8c\x04"
      "eval\x93)R.";
  write_file(tmp.file("eval.pth"), make_zip({{"archive/data.pkl", eval}}));
  e = error_of(tmp.file("eval.pth"));
  EXPECT_NE(e.find("'builtins.eval'"), std::string::npos) << e;

  // An allowed global called as code: REDUCE on a storage class.
  const std::string call =
      "\x80\x02"
      "ctorch\nFloatStorage\n)R.";
  write_file(tmp.file("call.pth"), make_zip({{"archive/data.pkl", call}}));
  e = error_of(tmp.file("call.pth"));
  EXPECT_NE(e.find("a call of 'torch.FloatStorage'"), std::string::npos) << e;

  // Object construction opcodes a state dict never uses (NEWOBJ).
  const std::string newobj =
      "\x80\x02"
      "ccollections\nOrderedDict\n)\x81.";
  write_file(tmp.file("newobj.pth"), make_zip({{"archive/data.pkl", newobj}}));
  e = error_of(tmp.file("newobj.pth"));
  EXPECT_NE(e.find("opcode 0x81"), std::string::npos) << e;

  // A TorchScript archive is a zip with data.pkl too, but of code objects.
  e = error_of(kGolden + "srvgg-tiny/model.torchscript.pt");
  EXPECT_NE(e.find("refused"), std::string::npos) << e;
}

}  // namespace
}  // namespace wm::io
