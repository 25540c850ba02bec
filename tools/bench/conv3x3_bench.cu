// Checker and benchmark of our 3×3 convolution (src/models/kernels/conv3x3_kernels.cu), built by
// nvcc alone (no LibTorch):
//   nvcc -std=c++17 -O3 -arch=sm_90a -I. tools/bench/conv3x3_bench.cu \
//       src/models/kernels/conv3x3_kernels.cu src/models/kernels/realesrgan_kernels.cu \
//       src/models/kernels/cudnn_fused_conv.cu -lcudnn -o conv3x3_bench
//   ./conv3x3_bench [--quick]
// 1. Correctness against a naive float32 reference kernel on random data (the default and the
//    candidate variants, Conv3x3Args::variant): every Cin × Cout the
//    Real-ESRGAN trunks use, fp16 and bf16, every epilogue, and edge cases (frames 1..4, sizes 1,
//    2, odd, not multiples of the tile; input channel strides and offsets; destinations at channel
//    offsets of wider buffers, whose other channels must stay untouched).
// 2. Timing of the trunk shapes at the benchmark sizes (SRVGG 64→64 on 4×1080×1920, RRDB's five
//    convolutions on 4×540×960): ours (epilogue fused, reading the dense-block buffer as the trunk
//    does) against cuDNN's best legacy-API algorithm (cudnnFindConvolutionForwardAlgorithmEx,
//    NHWC half, float32 compute) alone and followed by the separate fused pass the trunk runs
//    today (launch_esrgan_mix). One JSON object on stdout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "src/models/kernels/conv3x3_launch.h"
#include "src/models/kernels/cuda_convert.cuh"
#include "src/models/kernels/cudnn_fused_conv.h"
#include "src/models/kernels/realesrgan_launch.h"

using namespace wm::models::cuda;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define DK(x)                                                                                   \
  do {                                                                                          \
    cudnnStatus_t s_ = (x);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

namespace {

// The cuDNN graph-API path (cudnn_fused_conv.h): one handle, one scratch buffer.
cudnnHandle_t g_handle = nullptr;
void* g_scratch = nullptr;
size_t g_scratch_bytes = 0;
void* scratch(size_t bytes) {
  if (bytes > g_scratch_bytes) {
    if (g_scratch) cudaFree(g_scratch);
    g_scratch = nullptr;
    g_scratch_bytes = 0;
    if (cudaMalloc(&g_scratch, bytes) != cudaSuccess) return nullptr;
    g_scratch_bytes = bytes;
  }
  return g_scratch;
}
// Variant -1 of the checks and timings: the cuDNN fused graph (PReLU in its general form);
// -2: the same with PReLU as max(y, a·y) (slopes in [0, 1], which the benchmark's are).
cudaError_t launch(EsrganDType dt, const Conv3x3Args& a) {
  if (a.variant >= 0) return launch_conv3x3(dt, a, nullptr);
  Conv3x3Args b = a;
  b.variant = 0;
  return launch_conv3x3_cudnn(g_handle, dt, b, a.variant == -2, nullptr, scratch);
}

__device__ float hash_unit(uint64_t i, uint32_t seed) {  // uniform in [-1, 1)
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return float(x >> 40) / float(1ull << 23) - 1.f;
}

template <typename T>
__global__ void fill(T* p, int64_t n, uint32_t seed, float scale, float shift) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = from_f<T>(hash_unit(i, seed) * scale + shift);
}

// One thread per (pixel, output channel), float32, the same epilogue, no rounding.
template <typename T>
__global__ void reference(Conv3x3Args a, float* out) {
  const int64_t total = int64_t(a.frames) * a.height * a.width * a.out_channels;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int co = int(i % a.out_channels);
    const int64_t pix = i / a.out_channels;
    const int x = int(pix % a.width), y = int((pix / a.width) % a.height);
    const int64_t n = pix / (int64_t(a.width) * a.height);
    const T* in = static_cast<const T*>(a.input);
    const T* w = static_cast<const T*>(a.weight);
    float s = 0.f;
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx) {
        const int yy = y + ky - 1, xx = x + kx - 1;
        if (yy < 0 || yy >= a.height || xx < 0 || xx >= a.width) continue;
        const T* ip = in + ((n * a.height + yy) * a.width + xx) * a.input_stride;
        const T* wp = w + (int64_t(co) * 9 + ky * 3 + kx) * a.in_channels;
        for (int c = 0; c < a.in_channels; ++c) s = fmaf(to_f(ip[c]), to_f(wp[c]), s);
      }
    float v = s + (a.bias ? to_f(static_cast<const T*>(a.bias)[co]) : 0.f);
    if (a.activation == Conv3x3Args::kPRelu && v < 0.f)
      v *= to_f(static_cast<const T*>(a.prelu)[co]);
    if (a.activation == Conv3x3Args::kLeaky && v < 0.f) v *= a.leaky_slope;
    if (a.residual1)
      v = to_f(static_cast<const T*>(a.residual1)[pix * a.residual1_stride + co]) + a.alpha1 * v;
    if (a.residual2)
      v = to_f(static_cast<const T*>(a.residual2)[pix * a.residual2_stride + co]) + a.alpha2 * v;
    out[i] = v;
  }
}

// ATen's cuDNN convolution adds the bias in a pass of its own (output.add_(bias)): the same
// pass here, 8 channels per thread.
template <typename T>
__global__ void add_bias(T* y, const T* bias, int64_t pixels, int channels) {
  const int vecs = channels / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pixels * vecs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % vecs) * 8;
    union {
      uint4 raw;
      T v[8];
    } u;
    u.raw = *reinterpret_cast<const uint4*>(y + i * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) u.v[k] = from_f<T>(to_f(u.v[k]) + to_f(bias[c + k]));
    *reinterpret_cast<uint4*>(y + i * 8) = u.raw;
  }
}

template <typename T>
struct Buf {
  T* p = nullptr;
  int64_t n = 0;
  explicit Buf(int64_t count) : n(count) {
    CK(cudaMalloc(&p, std::max<int64_t>(count, 1) * sizeof(T)));
  }
  ~Buf() { cudaFree(p); }
  void random(uint32_t seed, float scale, float shift = 0.f) {
    fill<T><<<1024, 256>>>(p, n, seed, scale, shift);
    CK(cudaGetLastError());
  }
  std::vector<T> host() const {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

struct Case {
  int n, h, w, cin, cout;
  int in_extra;   // input stride = cin + in_extra; the input starts at channel in_extra / 2
  int act;        // Conv3x3Args::Activation
  int residuals;  // 0, 1, 2
};

// Runs one case; returns the max abs error, sets ok.
template <typename T>
double check_case(const Case& c, int variant, bool& ok, std::string& why) {
  const int64_t pix = int64_t(c.n) * c.h * c.w;
  const int in_stride = c.cin + c.in_extra, in_off = (c.in_extra / 2) / 8 * 8;
  Buf<T> in(pix * in_stride), w(int64_t(c.cout) * 9 * c.cin), bias(c.cout), slope(c.cout);
  in.random(1, 1.f);
  w.random(2, std::sqrt(3.f / (9.f * c.cin)));
  bias.random(3, 0.1f);
  slope.random(4, 0.25f, 0.25f);
  const int r_stride = c.cout + 32;
  Buf<T> r1(pix * r_stride), r2(pix * c.cout);
  r1.random(5, 1.f);
  r2.random(6, 1.f);
  const int wide = c.cout + 64, wide_off = 32;
  Buf<T> dense(pix * c.cout), wide_buf(pix * wide);
  wide_buf.random(7, 1.f);
  const std::vector<T> wide_before = wide_buf.host();
  Conv3x3Args a;
  a.input = in.p + in_off;
  a.input_stride = in_stride;
  a.in_channels = c.cin;
  a.weight = w.p;
  a.bias = bias.p;
  a.out_channels = c.cout;
  a.activation = c.act;
  a.prelu = slope.p;
  a.leaky_slope = 0.2f;
  if (c.residuals >= 1) {
    a.residual1 = r1.p + 8;
    a.residual1_stride = r_stride;
    a.alpha1 = 0.2f;
  }
  if (c.residuals >= 2) {
    a.residual2 = r2.p;
    a.residual2_stride = c.cout;
    a.alpha2 = 0.2f;
  }
  a.out[0] = dense.p;
  a.out_stride[0] = c.cout;
  a.out[1] = wide_buf.p + wide_off;
  a.out_stride[1] = wide;
  a.outputs = 2;
  a.frames = c.n;
  a.height = c.h;
  a.width = c.w;
  a.variant = variant;
  const EsrganDType dt = sizeof(T) == 2 && std::is_same<T, __half>::value ? EsrganDType::kFloat16
                                                                          : EsrganDType::kBFloat16;
  const cudaError_t launched = launch(dt, a);
  if (launched == cudaErrorNotSupported) {
    ok = true;
    why = "not supported";
    return -1;
  }
  CK(launched);
  Buf<float> ref(pix * c.cout);
  reference<T><<<2048, 256>>>(a, ref.p);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const std::vector<float> hr = ref.host();
  const std::vector<T> hd = dense.host(), hw = wide_buf.host();
  const double rel = std::is_same<T, __half>::value ? 1.0 / 1024 : 1.0 / 128;
  double worst = 0;
  ok = true;
  for (int64_t p = 0; p < pix; ++p) {
    for (int k = 0; k < c.cout; ++k) {
      const double r = hr[p * c.cout + k];
      const double d = to_f(hd[p * c.cout + k]), v = to_f(hw[p * wide + wide_off + k]);
      const double e = std::max(std::fabs(d - r), std::fabs(v - r));
      worst = std::max(worst, e);
      if (!(e <= 1e-3 + rel * std::fabs(r)) && ok) {
        ok = false;
        why = "pixel " + std::to_string(p) + " channel " + std::to_string(k) + ": ref " +
              std::to_string(r) + " dense " + std::to_string(d) + " wide " + std::to_string(v);
      }
    }
    for (int k = 0; k < wide; ++k) {
      if (k >= wide_off && k < wide_off + c.cout) continue;
      if (std::memcmp(&hw[p * wide + k], &wide_before[p * wide + k], sizeof(T)) && ok) {
        ok = false;
        why = "pixel " + std::to_string(p) + ": channel " + std::to_string(k) +
              " outside the destination changed";
      }
    }
  }
  return worst;
}

// The tensor cores' mma.sync ceiling: every warp runs CHAINS independent m16n8k16 chains.
template <int CHAINS>
__global__ void mma_peak(float* out, int iters) {
  const uint32_t a[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  const uint32_t b0 = 0x00003c00u ^ threadIdx.x, b1 = 0x3c000000u;
  float acc[CHAINS][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
          "%7}, {%8, %9}, {%0, %1, %2, %3};\n"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  float sum = 0;
#pragma unroll
  for (int c = 0; c < CHAINS; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (sum == 1234.5f) out[threadIdx.x] = sum;
}

double flops(int64_t pix, int cin, int cout) { return 2.0 * pix * cin * cout * 9; }

template <typename F>
double time_ms(F&& f, int iters) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

struct Shape {
  const char* name;
  int n, h, w, cin, cout, in_stride;
  int act;
  bool residual;
  int mix_outputs;  // what the trunk's separate pass writes today
};

template <typename T>
std::string bench_shape(cudnnHandle_t handle, const Shape& s, int iters, double& ours_ms,
                        double& cudnn_pass_ms) {
  const bool half = std::is_same<T, __half>::value;
  const int64_t pix = int64_t(s.n) * s.h * s.w;
  Buf<T> in(pix * s.in_stride), in_dense(pix * s.cin), w(int64_t(s.cout) * 9 * s.cin), bias(s.cout),
      slope(s.cout), out(pix * s.cout), y(pix * s.cout), res(pix * 64);
  in.random(11, 1.f);
  in_dense.random(12, 1.f);
  w.random(13, std::sqrt(3.f / (9.f * s.cin)));
  bias.random(14, 0.1f);
  slope.random(15, 0.25f, 0.25f);
  res.random(16, 1.f);
  std::vector<Buf<T>*> mix_out;
  for (int o = 0; o < s.mix_outputs; ++o) mix_out.push_back(new Buf<T>(pix * s.cout));
  const EsrganDType dt = half ? EsrganDType::kFloat16 : EsrganDType::kBFloat16;

  Conv3x3Args a;
  a.input = in.p;
  a.input_stride = s.in_stride;
  a.in_channels = s.cin;
  a.weight = w.p;
  a.bias = bias.p;
  a.out_channels = s.cout;
  a.activation = s.act;
  a.prelu = slope.p;
  if (s.residual) {
    a.residual1 = res.p;
    a.residual1_stride = 64;
    a.alpha1 = 0.2f;
  }
  a.out[0] = out.p;
  a.out_stride[0] = s.cout;
  a.outputs = 1;
  a.frames = s.n;
  a.height = s.h;
  a.width = s.w;
  // Every variant (Conv3x3Args::variant); ours_ms is the default's.
  std::string variants = "{";
  const int kVariants[] = {0, 1, 2, 8, -1, -2};
  for (int v : kVariants) {
    a.variant = v;
    if (v < 0 && launch(dt, a) == cudaErrorNotSupported) continue;
    const double ms = time_ms([&] { CK(launch(dt, a)); }, iters);
    if (v == 0) ours_ms = ms;
    char vb[64];
    std::snprintf(vb, sizeof vb, "%s\"%d\": %.4f", v ? ", " : "", v, ms);
    variants += vb;
  }
  variants += "}";
  a.variant = 0;

  const cudnnDataType_t cdt = half ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  DK(cudnnCreateTensorDescriptor(&xd));
  DK(cudnnCreateTensorDescriptor(&yd));
  DK(cudnnCreateFilterDescriptor(&wd));
  DK(cudnnCreateConvolutionDescriptor(&cd));
  DK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, cdt, s.n, s.cin, s.h, s.w));
  DK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, cdt, s.n, s.cout, s.h, s.w));
  DK(cudnnSetFilter4dDescriptor(wd, cdt, CUDNN_TENSOR_NHWC, s.cout, s.cin, 3, 3));
  DK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  DK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
  size_t ws_bytes = size_t(1) << 30;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));
  cudnnConvolutionFwdAlgoPerf_t perf[16];
  int returned = 0;
  DK(cudnnFindConvolutionForwardAlgorithmEx(handle, xd, in_dense.p, wd, w.p, cd, yd, y.p, 16,
                                            &returned, perf, ws, ws_bytes));
  int best = -1;
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      best = i;
      break;
    }
  std::string json;
  if (best < 0) {
    std::fprintf(stderr, "cudnn found no algorithm for %s\n", s.name);
    cudnn_pass_ms = 0;
  } else {
    const float one = 1.f, zero = 0.f;
    auto conv = [&] {
      DK(cudnnConvolutionForward(handle, &one, xd, in_dense.p, wd, w.p, cd, perf[best].algo, ws,
                                 perf[best].memory, &zero, yd, y.p));
    };
    const double cudnn_ms = time_ms(conv, iters);
    EsrganMixArgs m;
    m.a = s.residual ? res.p : y.p;
    m.a_stride = s.cout;
    if (s.residual) {
      m.b = y.p;
      m.b_stride = s.cout;
      m.beta = 0.2f;
    }
    m.slope = s.residual ? -1.f : 0.2f;
    for (int o = 0; o < s.mix_outputs; ++o) {
      m.out[o] = mix_out[o]->p;
      m.out_stride[o] = s.cout;
    }
    m.outputs = s.mix_outputs;
    m.pixels = pix;
    m.channels = s.cout;
    const double pass_ms = time_ms([&] { CK(launch_esrgan_mix(dt, m, nullptr)); }, iters);
    const double bias_ms = time_ms(
        [&] {
          add_bias<T><<<2048, 256>>>(y.p, bias.p, pix, s.cout);
          CK(cudaGetLastError());
        },
        iters);
    cudnn_pass_ms = cudnn_ms + bias_ms + pass_ms;
    const double f = flops(pix, s.cin, s.cout);
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "{\"shape\": \"%s\", \"dtype\": \"%s\", \"n\": %d, \"h\": %d, \"w\": %d, "
                  "\"cin\": %d, \"cout\": %d, \"ours_ms\": %.4f, \"ours_tflops\": %.1f, "
                  "\"cudnn_ms\": %.4f, \"cudnn_tflops\": %.1f, \"cudnn_algo\": %d, "
                  "\"bias_ms\": %.4f, \"pass_ms\": %.4f, \"cudnn_plus_passes_ms\": %.4f, "
                  "\"speedup_vs_cudnn_plus_passes\": %.3f, \"ours_variants_ms\": %s}",
                  s.name, half ? "fp16" : "bf16", s.n, s.h, s.w, s.cin, s.cout, ours_ms,
                  f / ours_ms / 1e9, cudnn_ms, f / cudnn_ms / 1e9, int(perf[best].algo), bias_ms,
                  pass_ms, cudnn_pass_ms, cudnn_pass_ms / ours_ms, variants.c_str());
    json = buf;
  }
  cudaFree(ws);
  for (auto* b : mix_out) delete b;
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return json;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  DK(cudnnCreate(&g_handle));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"device\": \"%s\",\n \"checks\": [\n", prop.name);
  std::vector<Case> cases;
  const int cins[] = {64, 96, 128, 160, 192};
  for (int cin : cins)
    for (int cout : {32, 64}) {
      cases.push_back({2, 37, 70, cin, cout, 192 + 32 - cin, Conv3x3Args::kLeaky, 0});
      cases.push_back({1, 16, 32, cin, cout, 0, Conv3x3Args::kPRelu, 1});
    }
  const int sizes[][3] = {{1, 1, 1},   {1, 2, 2},   {2, 1, 7},  {1, 7, 1},  {3, 3, 5},
                          {4, 17, 33}, {1, 31, 47}, {2, 2, 65}, {1, 65, 2}, {1, 16, 33}};
  cases.push_back({2, 67, 129, 192, 64, 0, Conv3x3Args::kNone, 2});
  cases.push_back({1, 45, 77, 64, 64, 32, Conv3x3Args::kPRelu, 0});
  int k = 0;
  for (const auto& sz : sizes) {
    const int cin = cins[k % 5], cout = k % 2 ? 64 : 32;
    cases.push_back({sz[0], sz[1], sz[2], cin, cout, (k % 3) * 16, k % 3, k % 3});
    ++k;
  }
  bool all_ok = true;
  bool first = true;
  for (int dt = 0; dt < 2; ++dt) {
    for (const Case& c : cases) {
      for (int variant : {0, 1, 2, -1, -2}) {
        bool ok = true;
        std::string why;
        const double err = dt == 0 ? check_case<__half>(c, variant, ok, why)
                                   : check_case<__nv_bfloat16>(c, variant, ok, why);
        all_ok = all_ok && ok;
        std::printf(
            "%s  {\"dtype\": \"%s\", \"variant\": %d, \"n\": %d, \"h\": %d, \"w\": %d, "
            "\"cin\": %d, \"cout\": %d, \"in_stride\": %d, \"act\": %d, \"residuals\": %d, "
            "\"max_err\": %.3g, \"ok\": %s%s%s%s}",
            first ? "" : ",\n", dt ? "bf16" : "fp16", variant, c.n, c.h, c.w, c.cin, c.cout,
            c.cin + c.in_extra, c.act, c.residuals, err, ok ? "true" : "false",
            ok ? "" : ", \"why\": \"", ok ? "" : why.c_str(), ok ? "" : "\"");
        first = false;
      }
    }
  }
  std::printf("\n ],\n \"all_ok\": %s", all_ok ? "true" : "false");
  {
    float* sink = nullptr;
    CK(cudaMalloc(&sink, 4096));
    std::printf(",\n \"mma_sync_peak_tflops\": {");
    const int warps_per_sm[] = {4, 8, 12, 16};
    for (int k = 0; k < 4; ++k) {
      const int warps = warps_per_sm[k], iters = 20000;
      auto run = [&] { mma_peak<8><<<prop.multiProcessorCount, warps * 32>>>(sink, iters); };
      const double ms = time_ms(run, 3);
      const double f = double(prop.multiProcessorCount) * warps * iters * 8 * 4096.0;
      std::printf("%s\"%d warps/SM\": %.1f", k ? ", " : "", warps, f / ms / 1e9);
    }
    std::printf("}");
    cudaFree(sink);
  }
  if (!quick) {
    cudnnHandle_t handle;
    DK(cudnnCreate(&handle));
    const Shape shapes[] = {
        {"srvgg 64->64 prelu", 4, 1080, 1920, 64, 64, 64, Conv3x3Args::kPRelu, false, 1},
        {"rrdb conv1 64->32 lrelu", 4, 540, 960, 64, 32, 192, Conv3x3Args::kLeaky, false, 4},
        {"rrdb conv2 96->32 lrelu", 4, 540, 960, 96, 32, 192, Conv3x3Args::kLeaky, false, 3},
        {"rrdb conv3 128->32 lrelu", 4, 540, 960, 128, 32, 192, Conv3x3Args::kLeaky, false, 2},
        {"rrdb conv4 160->32 lrelu", 4, 540, 960, 160, 32, 192, Conv3x3Args::kLeaky, false, 1},
        {"rrdb conv5 192->64 +res", 4, 540, 960, 192, 64, 192, Conv3x3Args::kNone, true, 5},
    };
    std::printf(",\n \"timings\": [\n");
    double rrdb_ours = 0, rrdb_cudnn = 0, srvgg_ours = 0, srvgg_cudnn = 0;
    first = true;
    for (int dt = 0; dt < 2; ++dt) {
      for (const Shape& s : shapes) {
        double o = 0, c = 0;
        const std::string j = dt == 0 ? bench_shape<__half>(handle, s, 20, o, c)
                                      : bench_shape<__nv_bfloat16>(handle, s, 20, o, c);
        std::printf("%s  %s", first ? "" : ",\n", j.c_str());
        std::fflush(stdout);
        first = false;
        if (dt == 0 && s.cin == 64 && s.cout == 64) {
          srvgg_ours += o;
          srvgg_cudnn += c;
        } else if (dt == 0) {
          rrdb_ours += o;
          rrdb_cudnn += c;
        }
      }
    }
    std::printf(
        "\n ],\n \"fp16_dense_block\": {\"ours_ms\": %.3f, \"cudnn_plus_passes_ms\": %.3f, "
        "\"speedup\": %.3f},\n \"fp16_srvgg_conv\": {\"ours_ms\": %.3f, "
        "\"cudnn_plus_passes_ms\": %.3f, \"speedup\": %.3f}",
        rrdb_ours, rrdb_cudnn, rrdb_cudnn / rrdb_ours, srvgg_ours, srvgg_cudnn,
        srvgg_cudnn / srvgg_ours);
    cudnnDestroy(handle);
  }
  std::printf("\n}\n");
  return all_ok ? 0 : 2;
}
