// Causal state snapshots (ModelSession::export_state / import_state, scheduler/causal_state.h):
// a session's state after some slices, saved to a file and loaded into a fresh session, makes
// that session compute the next slice bit for bit as the original one does (CPU, float32), for
// the Wan2.1 and SeedVR2 VAEs, encoder and decoder; damaged or foreign files are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "scheduler/causal_state.h"
#include "src/model.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

using sched::load_causal_state;
using sched::save_causal_state;

struct Case {
  const char* kind;
  const char* task;
};

ModelConfig config_of(const Case& c) { return tiny_vae_config(c.kind, c.task); }

// Slice `index` of a sequence: encoders take 5 then 4 frames of RGB 64×48, decoders 2 latent
// frames of 8×6; values from a fixed seed.
Planar slice(const Model& model, int index) {
  const ModelTraits& t = model.traits();
  const bool encode = t.scale_den > 1;
  const int frames = encode ? (index == 0 ? 5 : 4) : 2;
  Planar p(t.in_channels, frames, encode ? 48 : 6, encode ? 64 : 8);
  std::mt19937 rng(1234 + index);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : p.data) v = u(rng);
  return p;
}

RunContext ctx(int index) {
  RunContext c;
  c.slice_index = index;
  c.first_slice = index == 0;
  c.last_slice = false;
  return c;
}

class CausalState : public ::testing::TestWithParam<Case> {};

TEST_P(CausalState, SavedAndLoadedStateContinuesBitForBit) {
  const std::unique_ptr<Model> model = make_model(config_of(GetParam()), Device{});
  ASSERT_TRUE(model->traits().causal_state);
  std::unique_ptr<ModelSession> a = model->open_session(Device{});
  a->run(slice(*model, 0), ctx(0));
  a->run(slice(*model, 1), ctx(1));
  std::vector<StateTensor> state;
  ASSERT_TRUE(a->export_state(state));
  ASSERT_FALSE(state.empty());

  TempDir dir("causal-state");
  const std::string path = dir.file("state.safetensors");
  const int64_t size = save_causal_state(path, state, "sequence-a", 9);
  std::string why;
  auto loaded = load_causal_state(path, "sequence-a", 9, size, &why);
  ASSERT_TRUE(loaded) << why;
  ASSERT_EQ(loaded->size(), state.size());

  std::unique_ptr<ModelSession> b = model->open_session(Device{});
  ASSERT_TRUE(b->import_state(*loaded));
  const Planar want = a->run(slice(*model, 2), ctx(2));
  const Planar got = b->run(slice(*model, 2), ctx(2));
  ASSERT_EQ(got.data.size(), want.data.size());
  EXPECT_EQ(std::memcmp(got.data.data(), want.data.data(), want.data.size() * sizeof(float)), 0);
  // And the slice after, from the state each has made since.
  const Planar want3 = a->run(slice(*model, 3), ctx(3));
  const Planar got3 = b->run(slice(*model, 3), ctx(3));
  EXPECT_EQ(std::memcmp(got3.data.data(), want3.data.data(), want3.data.size() * sizeof(float)), 0);

  // The state matters: a session that saw other frames before computes other values.
  std::unique_ptr<ModelSession> c = model->open_session(Device{});
  c->run(slice(*model, 0), ctx(0));
  const Planar other = c->run(slice(*model, 2), ctx(1));
  ASSERT_EQ(other.data.size(), want.data.size());
  EXPECT_NE(std::memcmp(other.data.data(), want.data.data(), want.data.size() * sizeof(float)), 0);
}

TEST_P(CausalState, DamagedOrForeignFilesAreRefused) {
  const std::unique_ptr<Model> model = make_model(config_of(GetParam()), Device{});
  std::unique_ptr<ModelSession> a = model->open_session(Device{});
  a->run(slice(*model, 0), ctx(0));
  std::vector<StateTensor> state;
  ASSERT_TRUE(a->export_state(state));
  TempDir dir("causal-state-bad");
  const std::string path = dir.file("state.safetensors");
  const int64_t size = save_causal_state(path, state, "sequence-a", 5);
  std::string why;
  EXPECT_FALSE(load_causal_state(path, "sequence-b", 5, size, &why));
  EXPECT_NE(why.find("another input"), std::string::npos) << why;
  EXPECT_FALSE(load_causal_state(path, "sequence-a", 9, size, &why));
  EXPECT_FALSE(load_causal_state(path, "sequence-a", 5, size + 1, &why));
  EXPECT_FALSE(load_causal_state(dir.file("none.safetensors"), "sequence-a", 5, -1, &why));

  // One bit flipped near the end (in the data area): same size, other bits.
  std::string bytes = read_text(path);
  bytes[bytes.size() - 3] ^= 0x10;
  write_text(path, bytes);
  EXPECT_FALSE(load_causal_state(path, "sequence-a", 5, size, &why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  // Truncated.
  write_text(path, bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(load_causal_state(path, "sequence-a", 5, -1, &why));

  // Tensors that do not fit the session are refused without touching it.
  std::unique_ptr<ModelSession> b = model->open_session(Device{});
  StateTensor bogus;
  bogus.name = "bogus";
  bogus.dtype = "F32";
  bogus.shape = {1};
  bogus.bytes.resize(4);
  EXPECT_FALSE(b->import_state({bogus}));
  EXPECT_FALSE(b->import_state({}));
}

INSTANTIATE_TEST_SUITE_P(Models, CausalState,
                         ::testing::Values(Case{"wan2.1-vae", "encode"},
                                           Case{"wan2.1-vae", "decode"},
                                           Case{"seedvr2-vae", "encode"},
                                           Case{"seedvr2-vae", "decode"}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.kind) + "_" + info.param.task;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace wm::test
