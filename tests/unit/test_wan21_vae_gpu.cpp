// Wan2.1 VAE on CUDA: golden vectors in float32 (TF32 off), bf16/fp16 against them (PSNR),
// exact causal slicing and tail chunking on the device, every execution variant against the
// golden data, and the fused kernels against ATen on random data. Skips without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/device_worker.h"
#include "parallel/torch/offload.h"
#include "src/models/kernels/torch/cuda_kernels.h"
#include "src/models/wan21/wan21_vae.h"
#include "src/weights/safetensors.h"
#include "tests/support/run.h"

namespace fs = std::filesystem;
using wm::Planar;

namespace {

std::string golden(const std::string& name) { return ::wm::test::golden_file(name); }

bool have_gpu() { return static_cast<int>(torch::cuda::device_count()) > 0; }
#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

const wm::Device kCuda{wm::Device::Kind::kCuda, 0};

wm::ModelConfig tiny_config(const std::string& task, wm::Precision precision) {
  std::ifstream in(golden("meta.json"));
  const nlohmann::json meta = nlohmann::json::parse(in);
  const auto& c = meta.at("config");
  wm::ModelConfig config;
  config.kind = "wan2.1-vae";
  config.task = task;
  config.weights = golden("weights.safetensors");
  auto& arch = wm::edit_options<wm::models::Wan21VaeOptions>(config);
  arch.dim = c.at("dim").get<int>();
  arch.z_dim = c.at("z_dim").get<int>();
  arch.dim_mult = c.at("dim_mult").get<std::vector<int>>();
  arch.num_res_blocks = c.at("num_res_blocks").get<int>();
  arch.temporal_downsample = c.at("temperal_downsample").get<std::vector<bool>>();
  config.precision = precision;
  return config;
}

// Builds the model with ModelConfig::tuning = tuning.
std::unique_ptr<wm::Model> tiny_model(const std::string& task, wm::Precision precision,
                                      const std::string& tuning = "",
                                      int64_t pinned_pool_bytes = 0) {
  wm::ModelConfig config = tiny_config(task, precision);
  config.pinned_pool_bytes = pinned_pool_bytes;
  config.tuning = tuning;
  return wm::models::make_wan21_vae(config, kCuda);
}

Planar read_planar(const wm::io::SafetensorsFile& file, const std::string& name) {
  const auto& info = file.info(name);
  Planar p(int(info.shape[1]), int(info.shape[2]), int(info.shape[3]), int(info.shape[4]));
  EXPECT_EQ(info.bytes, p.data.size() * sizeof(float));
  std::memcpy(p.data.data(), info.data, info.bytes);
  return p;
}

struct GoldenCase {
  Planar input, output;
};
GoldenCase golden_case(const std::string& name) {
  wm::io::SafetensorsFile file(golden(name + ".safetensors"));
  return {read_planar(file, "input"), read_planar(file, "output")};
}

Planar frames(const Planar& p, int t0, int n) {
  Planar out(p.channels, n, p.height, p.width);
  for (int c = 0; c < p.channels; ++c) {
    std::memcpy(out.plane(c, 0), p.plane(c, t0), size_t(n) * p.plane_size() * sizeof(float));
  }
  return out;
}

Planar concat(const std::vector<Planar>& parts) {
  int t = 0;
  for (const Planar& p : parts) t += p.frames;
  Planar out(parts.at(0).channels, t, parts[0].height, parts[0].width);
  int t0 = 0;
  for (const Planar& p : parts) {
    for (int c = 0; c < p.channels; ++c) {
      std::memcpy(out.plane(c, t0), p.plane(c, 0), p.data.size() / p.channels * sizeof(float));
    }
    t0 += p.frames;
  }
  return out;
}

// Runs the slices on GPU 0's device worker (its stream, staging and output copier), as jobs do.
Planar run_slices(const wm::Model& model, const Planar& input, const std::vector<int>& sizes) {
  auto session = model.open_session(kCuda);
  wm::parallel::DeviceWorker& worker = wm::parallel::device_worker(kCuda);
  std::vector<Planar> outs;
  int t0 = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    wm::RunContext ctx;
    ctx.slice_index = int64_t(i);
    ctx.first_slice = i == 0;
    ctx.device = worker.context();
    outs.push_back(worker.call([&] { return session->run(frames(input, t0, sizes[i]), ctx); }));
    t0 += sizes[i];
  }
  return concat(outs);
}

struct Diff {
  double max_abs = 0, psnr = 0;
};
Diff diff(const Planar& a, const Planar& ref) {
  EXPECT_EQ(a.data.size(), ref.data.size());
  if (a.data.size() != ref.data.size()) return {1e30, 0};
  double lo = 1e300, hi = -1e300, se = 0, m = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double d = double(a.data[i]) - double(ref.data[i]);
    if (std::isnan(d)) return {1e30, 0};
    m = std::max(m, std::abs(d));
    se += d * d;
    lo = std::min(lo, double(ref.data[i]));
    hi = std::max(hi, double(ref.data[i]));
  }
  const double mse = se / double(a.data.size());
  return {m, 10 * std::log10((hi - lo) * (hi - lo) / std::max(mse, 1e-30))};
}

void check_golden(const std::string& task, const std::string& name, const std::string& tuning,
                  const std::vector<int>& slices = {}, int64_t pinned_pool_bytes = 0) {
  auto model = tiny_model(task, wm::Precision::kFloat32, tuning, pinned_pool_bytes);
  GoldenCase g = golden_case(name);
  const Planar out =
      run_slices(*model, g.input, slices.empty() ? std::vector<int>{g.input.frames} : slices);
  const Diff d = diff(out, g.output);
  std::cout << "[ golden   ] cuda fp32 " << name << " tuning '" << tuning << "' pinned pool "
            << pinned_pool_bytes << " max abs error " << d.max_abs << "\n";
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(d.max_abs));
  EXPECT_LE(d.max_abs, 1e-4);
}

// --- golden, float32 ---------------------------------------------------------------------------

TEST(Wan21VaeGpu, GoldenDecodeT5) {
  REQUIRE_GPU();
  check_golden("decode", "decode_t5", "");
}
TEST(Wan21VaeGpu, GoldenDecodeT9) {
  REQUIRE_GPU();
  check_golden("decode", "decode_t9", "");
}
TEST(Wan21VaeGpu, GoldenEncodeT17) {
  REQUIRE_GPU();
  check_golden("encode", "encode_t17", "");
}
// Every execution variant computes the same function.
TEST(Wan21VaeGpu, GoldenDecodeVariants) {
  REQUIRE_GPU();
  for (const char* tuning :
       {"fused=0", "raw_conv=0", "subpixel=0", "fused=0,raw_conv=0,subpixel=0", "conv_frames=3",
        "tail_frames=2", "tail_frames=5,conv_frames=2", "cudnn_benchmark=0"}) {
    check_golden("decode", "decode_t9", tuning);
  }
}
TEST(Wan21VaeGpu, GoldenDecodeSlices) {
  REQUIRE_GPU();
  check_golden("decode", "decode_t9", "", {1, 1, 1, 1, 1, 1, 1, 1, 1});
  check_golden("decode", "decode_t9", "tail_frames=3", {2, 3, 4});
  // Exact tail tiles, their causal state in pinned host memory between slices.
  check_golden("decode", "decode_t9", "tail_tiles=2x2,host_state=1,tail_frames=3", {2, 3, 4});
  check_golden("decode", "decode_t9", "tail_tiles=1x3,host_state=0", {4, 5});
  check_golden("decode", "decode_t9", "tail_tiles=1x1,host_state=1", {1, 8});
  check_golden("encode", "encode_t17", "", {5, 4, 4, 4});
  // Slices decoded in parts (what out of memory before the tail falls back to).
  check_golden("decode", "decode_t9", "part_latents=2", {3, 6});
  check_golden("decode", "decode_t9", "part_latents=1,tail_tiles=2x2,host_state=1", {4, 5});
  // Staging pools of 16 KiB: outputs and inputs cross in many pieces of whole rows.
  check_golden("decode", "decode_t9", "tail_tiles=2x2,host_state=1,tail_frames=3", {2, 3, 4},
               16 << 10);
  check_golden("encode", "encode_t17", "", {5, 4, 4, 4}, 16 << 10);
}

// Device chunks through a pool far smaller than a chunk, cropped and whole-width, several at
// once; and an upload in pieces, read by work on the current stream.
TEST(Wan21VaeGpu, OffloadAndStagingInPieces) {
  REQUIRE_GPU();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
  wm::parallel::OutputOffload offload(4 * 1024, 4, /*max_chunks=*/2);
  Planar dst;
  offload.allocate(dst, 3, 8, 40, 64);
  at::Tensor expected = at::zeros({3, 8, 40, 64});
  for (int i = 0; i < 8; ++i) {
    const bool crop = i % 2 == 1;
    const at::Tensor chunk = at::rand({3, 1, crop ? 17 : 40, crop ? 23 : 64}, cuda);
    const int top = crop ? 11 : 0, left = crop ? 30 : 0;
    offload.push(chunk, dst, i, top, left);
    expected.narrow(1, i, 1)
        .narrow(2, top, chunk.size(2))
        .narrow(3, left, chunk.size(3))
        .copy_(chunk.cpu());
  }
  offload.finish();
  EXPECT_LE(offload.staged_bytes(), 4 * 1024);
  EXPECT_GT(offload.pieces(), 8);
  EXPECT_TRUE(at::equal(at::from_blob(dst.data.data(), {3, 8, 40, 64}, at::kFloat), expected));

  Planar in(3, 5, 40, 64);
  for (size_t i = 0; i < in.data.size(); ++i) in.data[i] = float(i % 9973);
  wm::parallel::InputStaging staging(8 * 1024, 2);
  for (int round = 0; round < 2; ++round) {
    const at::Tensor up = staging.upload(in, at::Device(at::kCUDA, 0));
    const at::Tensor doubled = (up * 2).cpu();  // on the current stream, after the copies
    const at::Tensor ref = at::from_blob(in.data.data(), {1, 3, 5, 40, 64}, at::kFloat) * 2;
    EXPECT_TRUE(at::equal(doubled, ref)) << "round " << round;
    EXPECT_LE(staging.staged_bytes(), 8 * 1024);
  }
}

// --- reduced precision ----------------------------------------------------------------------

void check_low_precision(wm::Precision precision, const char* label, double min_psnr,
                         const std::string& tuning = "") {
  GoldenCase g = golden_case("decode_t9");
  auto model = tiny_model("decode", precision, tuning);
  const Diff d = diff(run_slices(*model, g.input, {g.input.frames}), g.output);
  std::cout << "[ golden   ] cuda " << label << " '" << tuning
            << "' decode_t9 vs float64 reference: PSNR " << d.psnr << " dB, max abs error "
            << d.max_abs << "\n";
  ::testing::Test::RecordProperty("psnr_db", std::to_string(d.psnr));
  EXPECT_GE(d.psnr, min_psnr);
}
TEST(Wan21VaeGpu, Bf16AgainstReference) {
  REQUIRE_GPU();
  check_low_precision(wm::Precision::kBFloat16, "bf16", 45.0);  // measured 49.1 dB
  // The two-GEMM attention (automatic for the full model's 384-wide head; this one's is 64).
  check_low_precision(wm::Precision::kBFloat16, "bf16", 45.0, "gemm_attention=1");
}
TEST(Wan21VaeGpu, Fp16AgainstReference) {
  REQUIRE_GPU();
  check_low_precision(wm::Precision::kFloat16, "fp16", 60.0);  // measured 67.4 dB
}

// --- kernels against ATen -----------------------------------------------------------------------

at::Tensor cl_randn(std::vector<int64_t> shape, at::ScalarType dtype) {
  return at::randn(shape, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat))
      .to(dtype)
      .contiguous(at::MemoryFormat::ChannelsLast3d);
}
at::Tensor randn_vector(int64_t n, at::ScalarType dtype) {
  return at::randn({n}, at::TensorOptions().device(at::kCUDA).dtype(at::kFloat)).to(dtype);
}

// A [1, c, 3, 5, 7] input: a packed tensor, or (crop) a view into a larger one along H and W,
// as a tail tile reads the previous block's output.
at::Tensor norm_input(int64_t c, at::ScalarType dtype, bool crop) {
  if (!crop) return cl_randn({1, c, 3, 5, 7}, dtype);
  return cl_randn({1, c, 3, 9, 12}, dtype).narrow(3, 3, 5).narrow(4, 2, 7);
}

TEST(Wan21VaeGpu, FusedNormMatchesAten) {
  REQUIRE_GPU();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (int64_t c : {16, 96, 192, 384}) {
      for (int variant = 0; variant < 16; ++variant) {
        const bool with_bias = variant & 1, with_res = variant & 2, crop = variant & 4;
        // Automatic threads per pixel, or one thread holding all of a pixel's vectors (up to
        // 8) or 32 threads (some idle).
        const int threads = variant & 8 ? (c * at::elementSize(dtype) / 16 > 8 ? 32 : 1) : 0;
        const at::Tensor x = norm_input(c, dtype, crop);
        const at::Tensor bias = with_bias ? randn_vector(c, dtype) : at::Tensor();
        const at::Tensor res = with_res ? norm_input(c, dtype, crop) : at::Tensor();
        const at::Tensor gamma = randn_vector(c, dtype);
        // Output written into the body of a padded buffer, which is poisoned first.
        at::Tensor buf = at::full({1, c, 5, 5, 7}, std::nan(""), x.options())
                             .contiguous(at::MemoryFormat::ChannelsLast3d);
        at::Tensor out = buf.narrow(2, 2, 3);
        at::Tensor sum = at::full({1, c, 3, 5, 7}, std::nan(""), x.options())
                             .contiguous(at::MemoryFormat::ChannelsLast3d);
        ASSERT_TRUE(
            wm::models::cuda::rms_norm(x, bias, res, gamma, out, sum, true, 1e-12, threads));
        at::Tensor s = x.to(at::kFloat);
        if (with_bias) s = s + bias.to(at::kFloat).view({1, c, 1, 1, 1});
        if (with_res) s = s + res.to(at::kFloat);
        if (with_bias || with_res) s = s.to(dtype).to(at::kFloat);
        at::Tensor ref =
            s / s.norm(2, {1}, true).clamp_min(1e-12) * gamma.to(at::kFloat).view({1, c, 1, 1, 1});
        ref = at::silu(ref);
        const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
        const double err = (out.to(at::kFloat) - ref).abs().max().item<double>();
        const double err_sum = (sum.to(at::kFloat) - s).abs().max().item<double>();
        EXPECT_LE(err, tol) << dtype << " C=" << c << " variant " << variant;
        EXPECT_LE(err_sum, tol) << dtype << " C=" << c << " variant " << variant;
        EXPECT_TRUE(buf.narrow(2, 0, 2).isnan().all().item<bool>()) << "wrote outside the body";
      }
    }
  }
  // In place on a crop: only the view's pixels change.
  const at::Tensor big = cl_randn({1, 96, 3, 9, 12}, at::kBFloat16);
  const at::Tensor before = big.clone();
  at::Tensor view = big.narrow(3, 3, 5).narrow(4, 2, 7);
  const at::Tensor res = norm_input(96, at::kBFloat16, true);
  const at::Tensor expect = (view.to(at::kFloat) + res.to(at::kFloat)).to(at::kBFloat16);
  ASSERT_TRUE(wm::models::cuda::rms_norm(view, {}, res, {}, {}, view, false, 1e-12));
  EXPECT_TRUE(view.equal(expect));
  at::Tensor outside = before.clone();
  outside.narrow(3, 3, 5).narrow(4, 2, 7).copy_(expect);
  EXPECT_TRUE(big.equal(outside)) << "wrote outside the view";
}

TEST(Wan21VaeGpu, AttentionScoresInFloat32) {
  REQUIRE_GPU();
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const int64_t rows = 77, keys = 333, d = 384;
    // q and k as column blocks of one [*, 3d] buffer (row stride 3d), as the model's qkv gives.
    const at::Tensor qkv =
        at::randn({keys, 3 * d}, at::TensorOptions().device(at::kCUDA)).to(dtype);
    const at::Tensor q = qkv.narrow(0, 5, rows).narrow(1, 0, d), k = qkv.narrow(1, d, d);
    at::Tensor out = at::full({rows, keys}, std::nan(""), qkv.options().dtype(at::kFloat));
    const double scale = 1.0 / std::sqrt(double(d));
    ASSERT_TRUE(wm::models::cuda::attention_scores(q, k, scale, out));
    const at::Tensor ref = at::matmul(q.to(at::kDouble), k.to(at::kDouble).t()) * scale;
    // Products of half-precision values are exact in float32; only the summation order differs.
    const double err = (out.to(at::kDouble) - ref).abs().max().item<double>();
    EXPECT_LE(err, 1e-4) << dtype;
    // Float32 inputs are not its business.
    EXPECT_FALSE(wm::models::cuda::attention_scores(q.to(at::kFloat), k.to(at::kFloat), 1, out));
  }
}

TEST(Wan21VaeGpu, DepthToSpaceMatchesAten) {
  REQUIRE_GPU();
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t c = 32, t = 3, h = 5, w = 6;
    const at::Tensor y = cl_randn({1, 4 * c, t, h + 1, w + 1}, dtype);
    const at::Tensor bias = randn_vector(c, dtype);
    at::Tensor out = at::full({1, c, t, 2 * h, 2 * w}, std::nan(""), y.options())
                         .contiguous(at::MemoryFormat::ChannelsLast3d);
    ASSERT_TRUE(wm::models::cuda::depth_to_space(y, bias, out));
    at::Tensor ref = at::empty({1, c, t, 2 * h, 2 * w}, y.options().dtype(at::kFloat));
    at::Tensor v = ref.view({1, c, t, h, 2, w, 2});
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 2; ++b) {
        v.select(6, b).select(4, a).copy_(
            y.narrow(1, (2 * a + b) * c, c).narrow(3, a, h).narrow(4, b, w).to(at::kFloat));
      }
    }
    ref.add_(bias.to(at::kFloat).view({1, c, 1, 1, 1}));
    const double tol = dtype == at::kFloat ? 1e-6 : 2e-2;
    EXPECT_LE((out.to(at::kFloat) - ref).abs().max().item<double>(), tol) << dtype;
  }
}

}  // namespace
