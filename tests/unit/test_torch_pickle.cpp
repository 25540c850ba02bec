// src/weights/torch_pickle.h: the golden torch.save files of tests/data/golden/upscalers read as
// the safetensors copies of the same weights, and files that must be refused: truncated, foreign,
// compressed, pickles that name code (os.system) or call what a state dict never calls, and
// pickles built to exhaust the reader (deep nesting, many values, recursive structures, FIFOs).
#include "src/weights/torch_pickle.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/base/error.h"
#include "src/weights/safetensors.h"
#include "tests/support/media.h"
#include "tests/support/stored_zip.h"

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

std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                     int method = 0) {
  return test::stored_zip(entries, method);
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

// torch.save(tensor): the root is the tensor (SeedVR2's pos_emb.pt), not a dict.
TEST(TorchCheckpoint, ReadsABareTensor) {
  test::TempDir tmp("pickle");
  const std::string path = tmp.file("pos_emb.pt");
  std::string p =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n("s;
  p += "(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"s
       "0X\x03\x00\x00\x00"s
       "cpuK\x07tQK\x01K\x02K\x03\x86K\x03K\x01\x86\x89"
       "ccollections\nOrderedDict\n)RtR."s;
  write_file(path, make_zip({{"archive/data.pkl", p}, {"archive/data/0", storage(7)}}));
  TorchCheckpoint c(path);
  ASSERT_NE(c.root_tensor(), nullptr);
  EXPECT_TRUE(c.tensors().empty());
  const TorchTensor& t = *c.root_tensor();
  EXPECT_EQ(t.dtype, "F32");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{3, 1}));
  float v[6];
  std::memcpy(v, t.data, sizeof v);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], float(i + 1) + 0.5f) << i;  // from offset 1
  // A dict has no root tensor; a bare number is neither.
  write_file(path, make_zip({{"archive/data.pkl", tensor_pickle(1, 2, 4)},
                             {"archive/data/0", storage(4)}}));
  EXPECT_EQ(TorchCheckpoint(path).root_tensor(), nullptr);
  write_file(path, make_zip({{"archive/data.pkl", "\x80\x02K\x05."s}}));
  EXPECT_NE(error_of(path).find("holds a int, not a tensor or a dict of tensors"),
            std::string::npos);
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

// A checkpoint whose data.pkl is `pickle` (and no storages).
std::string pickle_file(test::TempDir& tmp, const std::string& name, const std::string& pickle) {
  const std::string path = tmp.file(name);
  write_file(path, make_zip({{"archive/data.pkl", pickle}}));
  return path;
}

TEST(TorchCheckpoint, RefusesDeepNestingWithoutCrashing) {
  test::TempDir tmp("pickle");
  // 2 million tuples, each holding the previous one (TUPLE1): 2 MB, allowed opcodes only. Built
  // as a chain of shared values it once crashed the reader when freed (a recursion 2 million
  // deep, SIGSEGV).
  std::string p = "\x80\x02)";
  p.append(2'000'000, '\x85');
  p += "0}.";
  std::string e = error_of(pickle_file(tmp, "deep.pth", p));
  EXPECT_NE(e.find("nested more than 100 deep"), std::string::npos) << e;
  // The same with lists, dicts and MARK-built tuples.
  std::string lists = "\x80\x02";
  for (int i = 0; i < 200; ++i) lists += "]";
  for (int i = 0; i < 199; ++i) lists += "a";
  e = error_of(pickle_file(tmp, "lists.pth", lists + "."));
  EXPECT_NE(e.find("nested more than 100 deep"), std::string::npos) << e;
  std::string dicts = "\x80\x02";
  dicts += "}";
  for (int i = 0; i < 150; ++i) dicts += "K\x01}";
  for (int i = 0; i < 150; ++i) dicts += "s";
  e = error_of(pickle_file(tmp, "dicts.pth", dicts + "."));
  EXPECT_NE(e.find("nested more than 100 deep"), std::string::npos) << e;
  // 100 levels are read (a state dict has a few).
  std::string ok = "\x80\x02}X\x01\x00\x00\x00k)"s;
  for (int i = 0; i < 98; ++i) ok += "\x85";
  TorchCheckpoint c(pickle_file(tmp, "ok.pth", ok + "s."));
  EXPECT_EQ(c.top_level().at("k"), "tuple");
}

TEST(TorchCheckpoint, ReadsALargeDictInLinearTime) {
  test::TempDir tmp("pickle");
  // A dict of 300 000 entries (4 MB) once took quadratic time: no verdict after 30 s. Keys
  // repeat every 100 000 entries, so later values replace earlier ones, as in Python.
  std::string p = "\x80\x02}(";
  for (int i = 0; i < 300'000; ++i) {
    const std::string key = "key." + std::to_string(i % 100'000);
    p += 'X';
    test::put_le(p, key.size(), 4);
    p += key + "J";
    test::put_le(p, uint64_t(i), 4);
  }
  p += "u.";
  TorchCheckpoint c(pickle_file(tmp, "big.pth", p));
  EXPECT_EQ(c.top_level().size(), 100'000u);
  EXPECT_EQ(c.top_level().at("key.99999"), "int");
  EXPECT_TRUE(c.tensors().empty());
}

TEST(TorchCheckpoint, RefusesTooManyValuesAndRecursiveStructures) {
  test::TempDir tmp("pickle");
  // 4.2 million values pushed and popped: each cheap, but past the bound on values made.
  std::string many = "\x80\x02}";
  for (int i = 0; i < 4'200'000; ++i) many += "N0";
  std::string e = error_of(pickle_file(tmp, "many.pth", many + "."));
  EXPECT_NE(e.find("more than 4194304 values"), std::string::npos) << e;

  // A dict that holds itself (memo reference): Python pickles it, a state dict never is one.
  e = error_of(pickle_file(tmp, "self.pth", "\x80\x02}q\x00X\x01\x00\x00\x00kh\x00s."s));
  EXPECT_NE(e.find("recursive structure"), std::string::npos) << e;
  // A list changed after it was put into a tuple.
  e = error_of(pickle_file(tmp, "late.pth",
                           "\x80\x02]q\x00\x85h\x00N"
                           "a."s));
  EXPECT_NE(e.find("recursive structure"), std::string::npos) << e;

  // One dict of 40 000 entries shared (memo) as the value of 200 top-level keys: 240 KB that
  // would have 8 million entries copied out; what is looked at is bounded (2^20).
  std::string shared = "\x80\x02}(X\x01\x00\x00\x00k}q\x00("s;
  for (uint64_t i = 0; i < 40'000; ++i) {
    shared += "J";
    test::put_le(shared, i, 4);
    shared += "N";
  }
  shared += "u";
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i);
    shared += "X";
    test::put_le(shared, key.size(), 4);
    shared += key + "h\x00"s;
  }
  e = error_of(pickle_file(tmp, "shared.pth", shared + "u."));
  EXPECT_NE(e.find("nested dicts hold more than 1048576 entries"), std::string::npos) << e;
}

TEST(TorchCheckpoint, BoundsTheErrorLine) {
  test::TempDir tmp("pickle");
  // A global named with a megabyte of text: the message quotes its start.
  const std::string name(1 << 20, 'x');
  const std::string e = error_of(pickle_file(tmp, "long.pth",
                                             "\x80\x02"
                                             "c" +
                                                 name + "\n" + name + "\n."));
  EXPECT_LT(e.size(), 600u) << e.substr(0, 600);
  EXPECT_NE(e.find("(2097153 bytes)"), std::string::npos) << e.substr(0, 600);
}

TEST(TorchCheckpoint, RefusesAFifoAtOnce) {
  test::TempDir tmp("pickle");
  // Opening a FIFO for reading waits for a writer: the reader once hung on one given as weights.
  const std::string fifo = tmp.file("weights.pth");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    TorchCheckpoint c(fifo);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), fifo + ": is a FIFO, not a regular file");
    EXPECT_EQ(e.exit_code(), kExitNoInput);
  }
  try {
    SafetensorsFile f(fifo);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a FIFO"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wm::io
