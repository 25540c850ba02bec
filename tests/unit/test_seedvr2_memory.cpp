// SeedVR2 VAE under memory pressure, on the CPU: causal state kept in host memory between uses
// (the same code the CUDA path runs, with plain copies instead of side-stream ones) computes
// exactly what device-resident state does; the decoder in two phases (the top level after the
// rest, over a spool) and state written in place compute what the plain pass does; the choice of
// host slots; a slice that runs out of
// device memory (an injected c10::OutOfMemoryError) is retried from the state before it and
// gives the same output as a run without the fault.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "parallel/memory_budget.h"
#include "src/base/error.h"
#include "src/models/seedvr2/seedvr2_layout.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/seedvr2/torch/seedvr2_blocks.h"
#include "src/weights/safetensors.h"
#include "tests/support/seedvr2_fault.h"

using wm::Planar;
using wm::RunContext;
namespace seedvr2 = wm::models::seedvr2;

namespace {

const std::string kGolden = std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/";

seedvr2::Architecture tiny_arch() {
  seedvr2::Architecture arch;
  arch.channels = {16, 32, 64, 64};
  arch.norm_groups = 4;
  return arch;
}

// A float32 [1, C, T, H, W] tensor of a golden file.
at::Tensor golden(const std::string& name, const std::string& tensor) {
  wm::io::SafetensorsFile file(kGolden + name + ".safetensors");
  const auto& info = file.info(tensor);
  at::Tensor t = at::empty(info.shape, at::kFloat);
  std::memcpy(t.data_ptr(), info.data, info.bytes);
  return t;
}

Planar to_planar(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  Planar p(int(c.size(1)), int(c.size(2)), int(c.size(3)), int(c.size(4)));
  std::memcpy(p.data.data(), c.data_ptr<float>(), p.data.size() * sizeof(float));
  return p;
}

at::Tensor to_tensor(const Planar& p) {
  return at::from_blob(const_cast<float*>(p.data.data()),
                       {1, p.channels, p.frames, p.height, p.width}, at::kFloat)
      .clone();
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return 1e9;
  return (a - b).abs().max().item<double>();
}

// The tiny golden model's network in `format` (ChannelsLast3d: the fused path, as on CUDA).
std::unique_ptr<seedvr2::Network> tiny_network(bool decoder, at::MemoryFormat format) {
  wm::io::SafetensorsFile weights(kGolden + "weights.safetensors");
  auto getter = [&](const std::string& key) {
    const auto& info = weights.info(key);
    at::Tensor t = at::empty(info.shape, at::kFloat);
    std::memcpy(t.data_ptr(), info.data, info.bytes);
    return t.dim() == 5 ? t.contiguous(format) : t;
  };
  return std::make_unique<seedvr2::Network>(tiny_arch(), decoder, getter, format);
}

// `x` through `net` in slices of `sizes` frames (time chunks of `work` bytes; 0: whole stages),
// slice k with its slots in host memory when on_host[k] (-1: the previous slice's choice).
// `phases` > 0: Network::forward_phased in that many phases; `in_place`: StreamState::in_place.
at::Tensor run_slices(const seedvr2::Network& net, const at::Tensor& x,
                      const std::vector<int64_t>& sizes, const std::vector<int>& on_host,
                      int64_t work, int phases = 0, bool in_place = false) {
  seedvr2::StreamState state;
  state.in_place = in_place;
  std::vector<at::Tensor> parts;
  int64_t t0 = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (k < on_host.size() && on_host[k] >= 0) {
      state.on_host.assign(size_t(net.state_slots()), char(on_host[k]));
    }
    auto emit = [&](const at::Tensor& y) { parts.push_back(y.clone()); };
    if (phases > 0) {
      net.forward_phased(x.narrow(2, t0, sizes[k]), state, k == 0, net.phase_starts(phases), {work},
                         emit);
    } else {
      net.forward_chunks(x.narrow(2, t0, sizes[k]), state, k == 0, work, emit);
    }
    t0 += sizes[k];
    if (k < on_host.size() && on_host[k] == 1) {
      // Between slices every slot's memory is a host tensor.
      for (const at::Tensor& m : state.memory) {
        if (m.defined()) {
          EXPECT_TRUE(m.is_cpu());
        }
      }
    }
  }
  EXPECT_EQ(t0, x.size(2));
  return at::cat(parts, 2);
}

Planar frames_of(const Planar& p, int t0, int n) {
  Planar out(p.channels, n, p.height, p.width);
  for (int c = 0; c < p.channels; ++c) {
    for (int t = 0; t < n; ++t) {
      std::memcpy(out.plane(c, t), p.plane(c, t0 + t), p.plane_size() * sizeof(float));
    }
  }
  return out;
}

// `input` through a fresh session of `model` in slices of `sizes` frames; `after` (if any) is
// called after each slice, while the session stands.
at::Tensor run_session(const wm::Model& model, const Planar& input, const std::vector<int>& sizes,
                       const std::function<void()>& after = {}) {
  auto session = model.open_session(wm::Device{});
  std::vector<at::Tensor> outs;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.last_slice = i + 1 == sizes.size();
    outs.push_back(to_tensor(session->run(frames_of(input, t0, sizes[i]), ctx)));
    t0 += sizes[i];
    if (after) after();
  }
  return at::cat(outs, 2);
}

wm::ModelConfig tiny_config(const std::string& task, const std::string& tuning = "") {
  wm::ModelConfig config;
  config.kind = "seedvr2-vae";
  config.task = task;
  config.weights = kGolden + "weights.safetensors";
  wm::edit_options<wm::models::Seedvr2VaeOptions>(config).norm_groups = 4;
  config.tuning = tuning;
  return config;
}

// Turns the injected fault off whatever the test does.
struct FaultOff {
  ~FaultOff() { wm::models::seedvr2_oom_fault_for_test(-1); }
};

}  // namespace

// The fused path (channels-last, what CUDA runs): every slot's memory goes to host memory after
// each use and comes back into its conv's time padding when the buffer is made (before the norm
// fills the rest). Decode and encode, in slices and one-frame chunks, with the choice switching
// between slices: bitwise the device-resident run (chunks vs whole stages: within rounding).
TEST(SeedVR2HostState, HostResidentStateEqualsDeviceState) {
  const at::MemoryFormat cl = at::MemoryFormat::ChannelsLast3d;
  for (bool decoder : {true, false}) {
    const auto net = tiny_network(decoder, cl);
    const at::Tensor x = decoder ? golden("decode_t3", "latent") : golden("encode_t9", "video");
    // (A 1-byte budget cuts every stage into single frames; a temporal downsampler runs whole
    // stride-2 windows.)
    const std::vector<int64_t> sizes =
        decoder ? std::vector<int64_t>{1, 1, 1} : std::vector<int64_t>{5, 4};
    const at::Tensor device = run_slices(*net, x, sizes, {0}, 0);
    const at::Tensor host = run_slices(*net, x, sizes, {1}, 0);
    const at::Tensor host_chunks = run_slices(*net, x, sizes, {1}, 1);
    const at::Tensor switching = run_slices(*net, x, sizes, {0, 1, 0}, 1);
    const double e1 = max_diff(host, device), e2 = max_diff(switching, host_chunks),
                 e3 = max_diff(host_chunks, device);
    std::cout << "[ host     ] " << (decoder ? "decode" : "encode") << ": host vs device state "
              << e1 << "; one-frame chunks, the choice switching "
              << "between slices vs host state " << e2 << "; chunks vs whole stages " << e3 << "\n";
    EXPECT_EQ(e1, 0.0);
    EXPECT_EQ(e2, 0.0);
    EXPECT_LE(e3, 1e-5);
  }
}

// The decoder in phases: every level below the top over the whole slice, its output spooled,
// then the top level over the spool one frame at a time (three phases: its first resnet, then
// the rest, over a second spool). With one-frame chunks everywhere (a 1-byte budget) that is the
// same computation as forward_chunks, bitwise; with whole stages within rounding. State written
// in place (StreamState::in_place) and host-resident state change nothing. Fused (channels-last)
// and reference (contiguous) networks; the encoder has no phases (forward_chunks).
TEST(SeedVR2Phases, PhasedEqualsThePlainPass) {
  const at::Tensor z = golden("decode_t5", "latent");
  const std::vector<int64_t> sizes = {2, 2, 1};
  for (at::MemoryFormat format : {at::MemoryFormat::ChannelsLast3d, at::MemoryFormat::Contiguous}) {
    const auto net = tiny_network(true, format);
    ASSERT_EQ(net->phase_starts(2).size(), 2u);
    ASSERT_EQ(net->phase_starts(3).size(), 3u);
    ASSERT_EQ(net->phase_starts(4).size(), 4u);
    EXPECT_EQ(net->phase_starts(1), std::vector<size_t>{0});
    const at::Tensor whole = run_slices(*net, z, sizes, {0}, 0);
    const at::Tensor chunks = run_slices(*net, z, sizes, {0}, 1);
    const bool fused = format == at::MemoryFormat::ChannelsLast3d;
    // (One-frame chunks are slow on the CPU: the reference network checks three phases only,
    // in place and host state are checked once each.)
    for (int phases : {2, 3, 4}) {
      if (!fused && phases != 3) continue;
      const double e1 = max_diff(run_slices(*net, z, sizes, {0}, 1, phases), chunks);
      const double e2 = max_diff(run_slices(*net, z, sizes, {0}, 0, phases), whole);
      EXPECT_EQ(e1, 0.0);
      EXPECT_LE(e2, 1e-5);
      double e3 = 0, e4 = 0;
      if (fused && phases == 3) {
        e3 = max_diff(run_slices(*net, z, sizes, {0}, 1, phases, true), chunks);
        e4 = max_diff(run_slices(*net, z, sizes, {1, 0, 1}, 1, phases, true), chunks);
        EXPECT_EQ(e3, 0.0);
        EXPECT_EQ(e4, 0.0);
      }
      std::cout << "[ phases   ] " << (fused ? "fused" : "reference") << ", " << phases
                << " phases: vs chunks " << e1 << ", vs whole stages " << e2 << "; in place " << e3
                << ", host state switching " << e4 << "\n";
    }
    if (fused) {
      EXPECT_EQ(max_diff(run_slices(*net, z, sizes, {0}, 0, 0, true), whole), 0.0);
    }
  }
  const auto encoder = tiny_network(false, at::MemoryFormat::ChannelsLast3d);
  EXPECT_EQ(encoder->phase_starts(2), std::vector<size_t>{0});
  const at::Tensor video = golden("encode_t9", "video");
  EXPECT_EQ(max_diff(run_slices(*encoder, video, {5, 4}, {0}, 1, 2),
                     run_slices(*encoder, video, {5, 4}, {0}, 1)),
            0.0);
}

// Through a session forced into phases (tuning phased=1: two, 2: three), in slices: the default
// session's output.
TEST(SeedVR2Phases, ForcedOnACpuSessionEqualsTheDefault) {
  const Planar z = to_planar(golden("decode_t5", "latent"));
  auto plain = wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{});
  const at::Tensor want = run_session(*plain, z, {2, 2, 1});
  for (const char* tuning : {"phased=1", "phased=2", "phased=3", "phased=1,work_mib=1",
                             "phased=3,host_state=1,work_mib=1"}) {
    auto forced = wm::models::make_seedvr2_vae(tiny_config("decode", tuning), wm::Device{});
    const double err = max_diff(run_session(*forced, z, {2, 2, 1}), want);
    std::cout << "[ phases   ] session " << tuning << " vs default: " << err << "\n";
    EXPECT_LE(err, 1e-6);
  }
}

namespace {

// What the tiny decoder's two phases hold in host memory for latents `z`: the parked state, and
// the spool per latent frame (0 when the network has no two phases).
std::pair<int64_t, int64_t> two_phase_host_bytes(const Planar& z) {
  const auto net = tiny_network(true, at::MemoryFormat::Contiguous);
  const int64_t h = z.height, w = z.width, elt = 4;
  int64_t state = 0;
  for (int k = 0; k < net->state_slots(); ++k) state += net->slot_bytes(k, h, w, elt);
  const std::vector<size_t> starts = net->phase_starts(2);
  if (starts.size() != 2) return {state, 0};
  return {state, net->stage_input_bytes(starts[1], h, w, elt)};
}

}  // namespace

// A host memory budget (tuning host_kib) too small for a slice's spools: the phases run over
// sub-ranges of its latent frames, bit for bit the whole slice's result; a budget below the
// parked state and one latent frame's spools is one clear error (exit 1), not a crash.
TEST(SeedVR2Phases, HostBudgetSubRangesEqualTheWholeSlice) {
  const Planar z = to_planar(golden("decode_t5", "latent"));
  const auto [state, per] = two_phase_host_bytes(z);
  ASSERT_GT(per, 0);
  auto whole = wm::models::make_seedvr2_vae(tiny_config("decode", "phased=1"), wm::Device{});
  const at::Tensor want = run_session(*whole, z, {3, 2});
  // Room for the state and n latent frames' spool: sub-ranges of n (n = 1, 2).
  for (int64_t n : {1, 2}) {
    const int64_t kib = (state + n * per + per / 2 + 1023) / 1024;
    const std::string tuning = "phased=1,host_kib=" + std::to_string(kib);
    auto ranged = wm::models::make_seedvr2_vae(tiny_config("decode", tuning), wm::Device{});
    const double err = max_diff(run_session(*ranged, z, {3, 2}), want);
    std::cout << "[ phases   ] " << tuning << " (sub-ranges of " << n << ") vs whole: " << err
              << "\n";
    EXPECT_EQ(err, 0.0);
  }
  const std::string tuning =
      "phased=1,host_kib=" + std::to_string(std::max<int64_t>(state / 1024, 1));
  auto small = wm::models::make_seedvr2_vae(tiny_config("decode", tuning), wm::Device{});
  try {
    run_session(*small, z, {3, 2});
    ADD_FAILURE() << "no error with " << tuning;
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(e.exit_code(), wm::kExitFailure);
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host_mib"), std::string::npos) << e.what();
  }
}

// Without tuning host_mib the phases plan with the process's one host budget (the device
// layer's, parallel::host_memory) less what other sessions hold of it: room for n latent
// frames' spools gives sub-ranges of n, exactly the whole slice's result; a session holding the
// budget leaves the next one too little (the same clear error); while it runs a session holds
// its share (the parked state and its spools), and gives it back when it ends.
TEST(SeedVR2Phases, SessionsShareTheProcessHostBudget) {
  const Planar z = to_planar(golden("decode_t5", "latent"));
  const auto [state, per] = two_phase_host_bytes(z);
  ASSERT_GT(per, 0);
  auto whole = wm::models::make_seedvr2_vae(tiny_config("decode", "phased=1"), wm::Device{});
  wm::parallel::MemoryPool& host = wm::parallel::host_memory();
  host.set_capacity(int64_t(1) << 40);
  const at::Tensor want = run_session(*whole, z, {3, 2});
  EXPECT_EQ(host.held(), 0);  // the session ended: its share is back

  // Room for the state and 1 latent frame's spool, while another session holds 64 MiB.
  const int64_t other = int64_t(64) << 20;
  host.set_capacity(other + state + per + per / 2);
  auto held = host.hold(other);
  int slices = 0;
  const int64_t share = state + per;  // the session's: the state and one frame's spools
  const at::Tensor got = run_session(*whole, z, {3, 2}, [&] {
    ++slices;
    EXPECT_EQ(host.held(), other + share);
  });
  EXPECT_EQ(slices, 2);
  EXPECT_EQ(max_diff(got, want), 0.0);
  EXPECT_EQ(host.held(), other);  // the session ended

  // Another session holds more: less than the state and one latent frame's spools are left.
  held->resize(other + per);
  try {
    run_session(*whole, z, {3, 2});
    ADD_FAILURE() << "no error with " << ((other + per) >> 10) << " KiB held by another session";
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(e.exit_code(), wm::kExitFailure);
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  held.reset();
  EXPECT_EQ(max_diff(run_session(*whole, z, {3, 2}), want), 0.0);
  host.set_capacity(0);
}

// The reference path (the CPU session's contiguous network) through a session forced to keep
// its state in host memory and run in 1 MiB chunks: the default session's output.
TEST(SeedVR2HostState, ForcedOnACpuSessionEqualsTheDefault) {
  const Planar z = to_planar(golden("decode_t5", "latent"));
  auto plain = wm::models::make_seedvr2_vae(tiny_config("decode"), wm::Device{});
  auto forced =
      wm::models::make_seedvr2_vae(tiny_config("decode", "host_state=1,work_mib=1"), wm::Device{});
  const at::Tensor want = run_session(*plain, z, {2, 2, 1});
  const at::Tensor got = run_session(*forced, z, {2, 2, 1});
  const double err = max_diff(got, want);
  std::cout << "[ host     ] session host_state=1,work_mib=1 vs default: " << err << "\n";
  EXPECT_LE(err, 1e-6);
}

// Host slots go lowest resolution first: with room for exactly the full-resolution slots (the
// decoder's last 8: the last upsampler's conv, 3 resnets, conv_out), those stay on the device.
TEST(SeedVR2HostState, LowestResolutionsGoToHostFirst) {
  const auto net = tiny_network(true, at::MemoryFormat::Contiguous);
  const int64_t h = 30, w = 40, elt = 2;
  const int slots = net->state_slots();
  ASSERT_GT(slots, 8);
  int64_t total = 0, full = 0;
  for (int k = 0; k < slots; ++k) {
    total += net->slot_bytes(k, h, w, elt);
    if (k >= slots - 8) full += net->slot_bytes(k, h, w, elt);
  }
  // conv_out keeps 2 frames of 16 channels at 8× the latent size.
  EXPECT_EQ(net->slot_bytes(slots - 1, h, w, elt), 16 * 2 * (8 * h) * (8 * w) * elt);
  EXPECT_EQ(net->largest_frame_bytes(h, w, elt), 32 * (8 * h) * (8 * w) * elt);
  EXPECT_EQ(net->host_slots(h, w, elt, total), std::vector<char>(size_t(slots), 0));
  EXPECT_EQ(net->host_slots(h, w, elt, 0), std::vector<char>(size_t(slots), 1));
  std::vector<char> want(size_t(slots), 1);
  for (int k = slots - 8; k < slots; ++k) want[size_t(k)] = 0;
  EXPECT_EQ(net->host_slots(h, w, elt, full), want);
}

// The official decoder at 1080p in bf16: the causal state that docs/gpu.md accounts for.
TEST(SeedVR2HostState, OfficialDecoderStateAt1080p) {
  const seedvr2::Architecture arch;  // official widths
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const seedvr2::ParamSpec& p : seedvr2::layout(arch)) shapes[p.key] = p.shape;
  const seedvr2::Network net(
      arch, true, [&](const std::string& key) { return at::empty(shapes.at(key), at::kBFloat16); });
  int64_t total = 0;
  for (int k = 0; k < net.state_slots(); ++k) total += net.slot_bytes(k, 135, 240, 2);
  EXPECT_EQ(net.state_slots(), 33);
  // 2 frames of every 3×3×3 conv's input (docs/gpu.md, SeedVR2 memory at 1080p).
  EXPECT_EQ(total, int64_t(17'917'977'600));
  EXPECT_EQ(net.largest_frame_bytes(135, 240, 2), int64_t(256) * 1080 * 1920 * 2);
  // Two phases spool the top level's input: 4 frames of 256 channels at 540p per latent frame.
  EXPECT_EQ(net.stage_input_bytes(net.phase_starts(2)[1], 135, 240, 2),
            int64_t(4) * 256 * 540 * 960 * 2);
  // The top level (the second phase of Network::forward_phased): the last upsampler's conv and
  // up_blocks.3 res0.conv1 (256 channels), 5 convs of 128 and conv_out (128), 2 frames each.
  // Three phases (Network::phase_starts(3)): the levels below, 7.31 GB; the top level's
  // Upsample3D and first resnet (256, 256 and 128 channels), 5.31 GB; the rest, 5.31 GB.
  const std::vector<size_t> starts = net.phase_starts(3);
  ASSERT_EQ(starts.size(), 3u);
  auto bytes = [&](const std::vector<char>& mine, int& n) {
    int64_t sum = 0;
    n = 0;
    for (int k = 0; k < net.state_slots(); ++k) {
      if (mine[size_t(k)]) {
        sum += net.slot_bytes(k, 135, 240, 2);
        ++n;
      }
    }
    return sum;
  };
  const int64_t frame = int64_t(1080) * 1920 * 2;  // bytes per channel of a full frame
  int n = 0;
  EXPECT_EQ(bytes(net.stage_slots(0, starts[1]), n), total - 2 * frame * (2 * 256 + 6 * 128));
  EXPECT_EQ(n, 25);
  const std::vector<char> top = net.stage_slots(starts[1], net.stage_count());
  EXPECT_EQ(bytes(top, n), 2 * frame * (2 * 256 + 6 * 128));  // 10.62 GB
  EXPECT_EQ(n, 8);
  EXPECT_EQ(bytes(net.stage_slots(starts[1], starts[2]), n), 2 * frame * (2 * 256 + 128));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(bytes(net.stage_slots(starts[2], net.stage_count()), n), 2 * frame * 5 * 128);
  EXPECT_EQ(n, 5);
  EXPECT_EQ(net.largest_frame_bytes(135, 240, 2, net.stage_slots(0, starts[1])),
            int64_t(512) * 540 * 960 * 2);
  // Four phases: the level below the top (from its Upsample3D: 4.78 GB) apart from the lower
  // ones (1.86 + 0.67 GB).
  const std::vector<size_t> four = net.phase_starts(4);
  ASSERT_EQ(four.size(), 4u);
  EXPECT_EQ(four[2], starts[1]);
  EXPECT_EQ(bytes(net.stage_slots(four[1], four[2]), n),
            2 * int64_t(540) * 960 * 2 * (2 * 512 + 5 * 256));
  EXPECT_EQ(n, 7);
  // host_slots among some slots leaves the others alone.
  EXPECT_EQ(net.host_slots(135, 240, 2, 0, top), top);
}

// A slice that runs out of device memory after its state moved on (the fault fires as its output
// is delivered) is run again from the state before it: the output equals a run without the
// fault, with no frame lost or repeated, and later slices continue from the right state.
TEST(SeedVR2OomRetry, RetriedSliceEqualsTheRunWithoutTheFault) {
  FaultOff off;
  const Planar z = to_planar(golden("decode_t5", "latent"));
  const Planar video = to_planar(golden("encode_t17", "video"));
  struct Case {
    std::string task, tuning;
    std::vector<int> sizes;
    int64_t fault;  // output chunk that fails
  };
  const std::vector<Case> cases = {
      {"decode", "", {2, 2, 1}, 1},            // whole slices: slice 1 fails
      {"decode", "work_mib=1", {2, 2, 1}, 7},  // mid-slice in one-frame chunks
      {"decode", "host_state=1,work_mib=1", {2, 2, 1}, 9},
      {"decode", "phased=1,work_mib=1", {2, 2, 1}, 8},
      {"decode", "phased=2", {2, 2, 1}, 1},
      {"encode", "", {5, 4, 8}, 2},  // the last slice
  };
  for (const Case& c : cases) {
    auto model = wm::models::make_seedvr2_vae(tiny_config(c.task, c.tuning), wm::Device{});
    const Planar& in = c.task == "decode" ? z : video;
    wm::models::seedvr2_oom_fault_for_test(-1);
    const at::Tensor want = run_session(*model, in, c.sizes);
    wm::models::seedvr2_oom_fault_for_test(c.fault);
    const at::Tensor got = run_session(*model, in, c.sizes);
    wm::models::seedvr2_oom_fault_for_test(-1);
    const double err = max_diff(got, want);
    std::cout << "[ oom      ] " << c.task << " '" << c.tuning << "' fault at chunk " << c.fault
              << ": max abs diff " << err << "\n";
    // Whole slices retry the same computation; chunked ones retry with half the chunk budget.
    if (c.tuning.empty()) {
      EXPECT_EQ(err, 0.0);
    } else {
      EXPECT_LE(err, 1e-6);
    }
  }
}

// Without retries (tuning oom_retry=0) the fault is the slice's error: a ModelError with exit
// status 1 (a retry with more memory may pass), and the tile's state is dropped.
TEST(SeedVR2OomRetry, WithoutRetryTheSliceFails) {
  FaultOff off;
  auto model = wm::models::make_seedvr2_vae(tiny_config("decode", "oom_retry=0"), wm::Device{});
  const Planar z = to_planar(golden("decode_t5", "latent"));
  auto session = model->open_session(wm::Device{});
  RunContext ctx;
  ctx.first_slice = true;
  wm::models::seedvr2_oom_fault_for_test(0);
  try {
    session->run(frames_of(z, 0, 2), ctx);
    FAIL() << "expected an out-of-memory error";
  } catch (const wm::ModelError& e) {
    EXPECT_EQ(e.exit_code(), wm::kExitFailure);
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  wm::models::seedvr2_oom_fault_for_test(-1);
  RunContext next;
  next.slice_index = 1;
  next.first_slice = false;
  EXPECT_THROW(session->run(frames_of(z, 2, 2), next), wm::ModelError);  // no earlier slice
}

TEST(SeedVR2HostState, TuningKeys) {
  const seedvr2::Tuning t =
      seedvr2::Tuning::parse("host_state=1,device_state_mib=512,oom_retry=0,phased=0");
  EXPECT_EQ(t.host_state, 1);
  EXPECT_EQ(t.phased, 0);
  EXPECT_EQ(seedvr2::Tuning::parse("").phased, -1);
  EXPECT_EQ(seedvr2::Tuning::parse("phased=3").phased, 3);
  EXPECT_EQ(seedvr2::Tuning::parse("phased=9").phased, 3);
  EXPECT_THROW(seedvr2::Tuning::parse("phased=-2"), wm::ModelError);
  EXPECT_EQ(t.device_state_mib, 512);
  EXPECT_FALSE(t.oom_retry);
  const seedvr2::Tuning d = seedvr2::Tuning::parse("");
  EXPECT_EQ(d.host_state, -1);
  EXPECT_EQ(d.device_state_mib, 0);
  EXPECT_TRUE(d.oom_retry);
  EXPECT_EQ(seedvr2::Tuning::parse(t.str()).str(), t.str());
  EXPECT_THROW(seedvr2::Tuning::parse("host_state=-2"), wm::ModelError);
  EXPECT_THROW(seedvr2::Tuning::parse("device_state_mib=x"), wm::ModelError);
  // cuDNN's search: plans timed per shape (5 unless asked; 0 leaves LibTorch's own).
  EXPECT_EQ(d.cudnn_benchmark_limit, 5);
  EXPECT_EQ(seedvr2::Tuning::parse("cudnn_benchmark_limit=0").cudnn_benchmark_limit, 0);
  EXPECT_EQ(seedvr2::Tuning::parse(seedvr2::Tuning::parse("cudnn_benchmark_limit=8").str())
                .cudnn_benchmark_limit,
            8);
  EXPECT_THROW(seedvr2::Tuning::parse("cudnn_benchmark_limit=-1"), wm::ModelError);
}
