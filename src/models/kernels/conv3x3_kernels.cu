// Our own 3×3 convolution (contract in src/models/kernels/conv3x3_launch.h): an implicit GEMM on
// tensor cores (mma.sync m16n8k16, fp32 accumulators) with the Real-ESRGAN epilogues fused.
//
// Persistent blocks of 8 warps, one per SM: a block keeps its slice of the weights (all nine
// taps, BN output channels) in shared memory for its whole life and walks output tiles of
// 16 rows × 32 pixels. A tile's input (18 × 34 pixels with the halo, zero outside the frame) comes
// in chunks of 32 channels through a two-stage cp.async pipeline that runs on across tiles, so the
// next chunk loads while this one computes. A warp owns 4 rows × 16 pixels × BN channels; for one
// horizontal tap and 16 input channels it loads the 6 input rows it needs once (ldmatrix) and
// uses each for the three vertical taps it contributes to, which halves the shared-memory reads
// of the A operand. Shared rows are padded by 16 bytes, which makes the ldmatrix reads free of
// bank conflicts when the row length in 16-byte units is odd (channel counts multiples of 16).
// The epilogue (bias, activation, residuals, one rounding) runs on the accumulators; 64-channel
// blocks then stage the tile through the stage buffer just consumed and store whole 16-byte
// vectors, 32-channel blocks store straight from the registers.
//
// Measured on an H100 (docs/gpu.md, "Own 3×3 convolution"): 255–315 TFLOP/s at the Real-ESRGAN
// trunk shapes, against mma.sync's ceiling of ~640 on that GPU and cuDNN's 225–235 at 32 output
// channels (cuDNN reaches 460–495 at 64, where it is faster than this kernel on the convolution
// alone).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>

#include "src/models/kernels/conv3x3_launch.h"
#include "src/models/kernels/cuda_convert.cuh"

namespace wm::models::cuda {
namespace {

// A block's geometry: output tiles of 16 rows × TW pixels (a warp per 4 rows × 16 pixels),
// CK input channels per pipeline stage.
template <int TW, int CK>
struct Geo {
  static constexpr int kTileH = 16, kTileW = TW;
  static constexpr int kWarpsX = TW / 16;
  static constexpr int kThreads = 32 * 4 * kWarpsX;
  static constexpr int kInH = kTileH + 2, kInW = kTileW + 2;  // with the halo
  static constexpr int kInPixels = kInH * kInW;
  static constexpr int kChunk = CK;
  static constexpr int kChunkRow = CK + 8;  // elements per pixel in shared memory (padded)
  static constexpr int kStageBytes = kInPixels * kChunkRow * 2;
};
using GeoDefault = Geo<32, 32>;
constexpr int kHeadBytes = 2 * 64 * 4;  // bias and slopes as float32
constexpr int kMaxSmem = 227 * 1024;

template <class G = GeoDefault>
size_t smem_bytes(int cin, int bn, int stages) {
  return size_t(kHeadBytes) + size_t(stages) * G::kStageBytes + size_t(9) * bn * (cin + 8) * 2;
}

template <typename T>
struct Pair;
template <>
struct Pair<__half> {
  using type = __half2;
  static __device__ __forceinline__ type make(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float2 get(type v) { return __half22float2(v); }
};
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type make(float a, float b) {
    return __floats2bfloat162_rn(a, b);
  }
  static __device__ __forceinline__ float2 get(type v) { return __bfloat1622float2(v); }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared; zeros when !valid (nothing is read then).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct TileGrid {
  int tiles_x = 0, tiles_y = 0;
  int64_t tiles = 0;
};

// BN output channels per block (the block's group of Cout is blockIdx.x % groups); kStages
// input stages; kUnroll: how far the (step, tap) loop is unrolled.
template <typename T, int BN, int kUnroll, int kStages, class G, bool kStaged>
__global__ void __launch_bounds__(G::kThreads, 1) conv3x3_kernel(Conv3x3Args a, TileGrid grid) {
  constexpr int kThreads = G::kThreads, kTileH = G::kTileH, kTileW = G::kTileW;
  constexpr int kInW = G::kInW, kInPixels = G::kInPixels, kChunk = G::kChunk;
  constexpr int kChunkRow = G::kChunkRow, kStageBytes = G::kStageBytes;
  static_assert(!kStaged || (kThreads / 32) * 64 * 80 <= kStageBytes, "staging does not fit");
  extern __shared__ __align__(16) unsigned char smem[];
  float* s_bias = reinterpret_cast<float*>(smem);
  float* s_slope = s_bias + 64;
  const uint32_t s_in = smem_addr(smem + kHeadBytes);
  const uint32_t s_w = s_in + kStages * kStageBytes;

  const int cin = a.in_channels;
  const int wrow = cin + 8;  // elements per weight row in shared memory
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int groups = a.out_channels / BN;
  const int group = int(blockIdx.x) % groups;
  const int64_t first = blockIdx.x / groups, step = gridDim.x / groups;
  const int co0 = group * BN;
  const int H = a.height, W = a.width;
  const T* in = static_cast<const T*>(a.input);
  const bool act = a.activation != Conv3x3Args::kNone;

  if (tid < BN) {
    s_bias[tid] = a.bias ? to_f(static_cast<const T*>(a.bias)[co0 + tid]) : 0.f;
    s_slope[tid] = a.activation == Conv3x3Args::kPRelu
                       ? to_f(static_cast<const T*>(a.prelu)[co0 + tid])
                       : a.leaky_slope;
  }
  // The block's weights: global [co][tap][ci] → shared [tap][n][ci] (rows padded).
  {
    const T* wg = static_cast<const T*>(a.weight) + int64_t(co0) * 9 * cin;
    const int vecs = cin / 8;
    for (int i = tid; i < 9 * BN * vecs; i += kThreads) {
      const int v = i % vecs, r = i / vecs;
      const int tap = r % 9, n = r / 9;
      cp_async16(s_w + ((tap * BN + n) * wrow + v * 8) * 2, wg + int64_t(r) * cin + v * 8, true);
    }
  }

  const int chunks = cin / kChunk;
  const int64_t local_tiles = first < grid.tiles ? (grid.tiles - first + step - 1) / step : 0;
  const int64_t total = local_tiles * chunks;
  const int per_frame = grid.tiles_x * grid.tiles_y;

  auto tile_origin = [&](int64_t g, int& n, int& y0, int& x0) {
    const int64_t tile = first + (g / chunks) * step;
    n = int(tile / per_frame);
    const int r = int(tile - int64_t(n) * per_frame);
    y0 = (r / grid.tiles_x) * kTileH;
    x0 = (r % grid.tiles_x) * kTileW;
  };
  auto load_chunk = [&](int64_t g, int stage) {
    int n, y0, x0;
    tile_origin(g, n, y0, x0);
    const int kc = int(g % chunks) * kChunk;
    const uint32_t base = s_in + stage * kStageBytes;
    for (int i = tid; i < kInPixels * (kChunk / 8); i += kThreads) {
      const int p = i / (kChunk / 8), v = i % (kChunk / 8);
      const int iy = p / kInW, ix = p - iy * kInW;
      const int gy = y0 - 1 + iy, gx = x0 - 1 + ix;
      const bool ok = gy >= 0 && gy < H && gx >= 0 && gx < W;
      const T* src = ok ? in + ((int64_t(n) * H + gy) * W + gx) * a.input_stride + kc + v * 8 : in;
      cp_async16(base + (p * kChunkRow + v * 8) * 2, src, ok);
    }
  };

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < total) load_chunk(st, st);
    cp_async_commit();
  }

  const int wy = warp / G::kWarpsX, wx = warp % G::kWarpsX;  // rows 4·wy.., pixels 16·wx..
  const uint32_t a_lane =
      ((wy * 4 * kInW + wx * 16 + (lane & 15)) * kChunkRow + (lane >> 4) * 8) * 2;
  const uint32_t b_lane = (((lane & 7) + ((lane >> 4) << 3)) * wrow + ((lane >> 3) & 1) * 8) * 2;

  float acc[4][BN / 8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

  for (int64_t g = 0; g < total; ++g) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (g + kStages - 1 < total) load_chunk(g + kStages - 1, int((g + kStages - 1) % kStages));
    cp_async_commit();

    const int kc = int(g % chunks);
    const uint32_t sa = s_in + int(g % kStages) * kStageBytes + a_lane;
    const uint32_t sb = s_w + b_lane + kc * kChunk * 2;
    // (16-channel step, horizontal tap) pairs; kept rolled where the body is large so the hot
    // loop stays small in the instruction cache.
#pragma unroll kUnroll
    for (int sk = 0; sk < 3 * (kChunk / 16); ++sk) {
      const int s = sk / 3, kx = sk - s * 3;
      const uint32_t a_at = sa + (kx * kChunkRow + s * 16) * 2;
      const uint32_t b_at = sb + (kx * BN * wrow + s * 16) * 2;
      uint32_t af[6][4];
#pragma unroll
      for (int j = 0; j < 6; ++j) ldsm_x4(af[j], a_at + j * kInW * kChunkRow * 2);
#pragma unroll
      for (int ky = 0; ky < 3; ++ky) {
#pragma unroll
        for (int q = 0; q < BN / 16; ++q) {
          uint32_t bf[4];
          ldsm_x4(bf, b_at + (ky * 3 * BN + 16 * q) * wrow * 2);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma16816<T>(acc[i][2 * q], af[i + ky], bf[0], bf[1]);
            mma16816<T>(acc[i][2 * q + 1], af[i + ky], bf[2], bf[3]);
          }
        }
      }
    }

    if (kc == chunks - 1) {  // the tile's last chunk: the epilogue
      int n, y0, x0;
      tile_origin(g, n, y0, x0);
      using P = Pair<T>;
      using T2 = typename P::type;
      // Bias and activation in place.
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        const int c = nt * 8 + (lane & 3) * 2;
        const float b0 = s_bias[c], b1 = s_bias[c + 1];
        const float k0 = s_slope[c], k1 = s_slope[c + 1];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float v = acc[i][nt][e] + ((e & 1) ? b1 : b0);
            if (act && v < 0.f) v *= (e & 1) ? k1 : k0;
            acc[i][nt][e] = v;
          }
      }
      const int c0 = co0 + (lane & 3) * 2;
      // Output channels nt·8 + 2·(lane & 3) + {0, 1} of output pixel (i, h) after the
      // residuals, rounded and packed.
      auto pack = [&](int i, int h, int nt, int64_t pix) -> uint32_t {
        float v0 = acc[i][nt][2 * h], v1 = acc[i][nt][2 * h + 1];
        if (a.residual1) {
          const float2 r = P::get(*reinterpret_cast<const T2*>(
              static_cast<const T*>(a.residual1) + pix * a.residual1_stride + c0 + nt * 8));
          v0 = fmaf(a.alpha1, v0, r.x);
          v1 = fmaf(a.alpha1, v1, r.y);
          if (a.residual2) {
            const float2 q = P::get(*reinterpret_cast<const T2*>(
                static_cast<const T*>(a.residual2) + pix * a.residual2_stride + c0 + nt * 8));
            v0 = fmaf(a.alpha2, v0, q.x);
            v1 = fmaf(a.alpha2, v1, q.y);
          }
        }
        const T2 t = P::make(v0, v1);
        return *reinterpret_cast<const uint32_t*>(&t);
      };
      const int outputs = (a.variant & 8) ? 0 : a.outputs;  // 8: benchmark without stores
      if constexpr (kStaged) {
        // Through shared memory (this chunk's stage, once every warp is done with it), 32
        // channels at a time: each lane then stores whole 16-byte vectors, a warp instruction
        // 64 contiguous bytes of each of 8 pixels.
        __syncthreads();
        constexpr int kRow = 80;  // bytes per staged pixel: 32 channels + 16 bytes of padding
        const uint32_t staged = s_in + int(g % kStages) * kStageBytes + warp * 64 * kRow;
        unsigned char* staged_ptr =
            smem + kHeadBytes + int(g % kStages) * kStageBytes + warp * 64 * kRow;
#pragma unroll
        for (int half = 0; half < BN / 32; ++half) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int oy = y0 + wy * 4 + i;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int ox = x0 + wx * 16 + (lane >> 2) + h * 8;
              if (oy >= H || ox >= W) continue;
              const int64_t pix = (int64_t(n) * H + oy) * W + ox;
              const int p = i * 16 + h * 8 + (lane >> 2);
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const uint32_t v = pack(i, h, half * 4 + j, pix);
                asm volatile(
                    "st.shared.b32 [%0], %1;\n" ::"r"(staged + p * kRow + j * 16 + (lane & 3) * 4),
                    "r"(v)
                    : "memory");
              }
            }
          }
          __syncwarp();
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int idx = k * 32 + lane, p = idx >> 2, v = idx & 3;
            const int oy = y0 + wy * 4 + (p >> 4), ox = x0 + wx * 16 + (p & 15);
            if (oy < H && ox < W) {
              const int64_t pix = (int64_t(n) * H + oy) * W + ox;
              const uint4 val = *reinterpret_cast<const uint4*>(staged_ptr + p * kRow + v * 16);
#pragma unroll 1
              for (int o = 0; o < outputs; ++o) {
                *reinterpret_cast<uint4*>(static_cast<T*>(a.out[o]) + pix * a.out_stride[o] + co0 +
                                          half * 32 + v * 8) = val;
              }
            }
          }
          __syncwarp();
        }
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int oy = y0 + wy * 4 + i;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int ox = x0 + wx * 16 + (lane >> 2) + h * 8;
            if (oy >= H || ox >= W) continue;
            const int64_t pix = (int64_t(n) * H + oy) * W + ox;
            uint32_t packed[BN / 8];
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt) packed[nt] = pack(i, h, nt, pix);
#pragma unroll 1
            for (int o = 0; o < outputs; ++o) {
              uint32_t* dst = reinterpret_cast<uint32_t*>(static_cast<T*>(a.out[o]) +
                                                          pix * a.out_stride[o] + c0);
#pragma unroll
              for (int nt = 0; nt < BN / 8; ++nt) dst[nt * 4] = packed[nt];
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;
    }
  }
  cp_async_wait<0>();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int BN, int kUnroll, int kStages, class G = GeoDefault, bool kStaged = false>
cudaError_t launch_typed(const Conv3x3Args& a, cudaStream_t stream) {
  constexpr int kTileH = G::kTileH, kTileW = G::kTileW, kThreads = G::kThreads;
  const size_t smem = smem_bytes<G>(a.in_channels, BN, kStages);
  if (smem > size_t(kMaxSmem)) return cudaErrorInvalidValue;
  auto kernel = conv3x3_kernel<T, BN, kUnroll, kStages, G, kStaged>;
  cudaError_t e;
  int device = 0, sms = 0;
  if ((e = cudaGetDevice(&device)) != cudaSuccess) return e;
  // The shared-memory limit, once per device (not again inside a CUDA graph capture).
  static std::atomic<uint64_t> configured{0};
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (!(configured.load(std::memory_order_acquire) & bit)) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem);
    if (e != cudaSuccess) return e;
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return e;
  TileGrid grid;
  grid.tiles_x = (a.width + kTileW - 1) / kTileW;
  grid.tiles_y = (a.height + kTileH - 1) / kTileH;
  grid.tiles = int64_t(a.frames) * grid.tiles_x * grid.tiles_y;
  const int groups = a.out_channels / BN;
  int64_t blocks = int64_t(sms) / groups * groups;
  if (blocks < groups) blocks = groups;
  if (blocks > grid.tiles * groups) blocks = grid.tiles * groups;
  kernel<<<int(blocks), kThreads, smem, stream>>>(a, grid);
  return cudaGetLastError();
}

// The measured choices (tools/bench/conv3x3_bench.cu, H100): 64-channel blocks with the tap
// loop rolled and the staged epilogue (6 % faster than direct stores at SRVGG's shape); 32-channel
// blocks with the tap loop unrolled and direct stores (staging gains nothing there).
template <typename T>
cudaError_t launch_choice(const Conv3x3Args& a, cudaStream_t stream, bool wide) {
  if (wide) {
    if (a.variant & 2) return launch_typed<T, 64, 1, 2>(a, stream);  // direct stores
    return launch_typed<T, 64, 1, 2, GeoDefault, true>(a, stream);
  }
  return launch_typed<T, 32, 6, 2>(a, stream);
}

}  // namespace

bool conv3x3_supported(int in_channels, int out_channels) {
  return in_channels > 0 && in_channels % 32 == 0 && in_channels <= 192 &&
         (out_channels == 32 || out_channels == 64);
}

cudaError_t launch_conv3x3(EsrganDType dtype, const Conv3x3Args& a, cudaStream_t stream) {
  if (!conv3x3_supported(a.in_channels, a.out_channels) || !a.input || !a.weight || a.outputs < 1 ||
      a.outputs > Conv3x3Args::kMaxOutputs || a.frames < 0 || a.height < 0 || a.width < 0 ||
      a.input_stride < a.in_channels || a.input_stride % 8 || !aligned16(a.input) ||
      !aligned16(a.weight) || (a.activation == Conv3x3Args::kPRelu && !a.prelu) ||
      (a.residual1 && (a.residual1_stride < a.out_channels || a.residual1_stride % 8 ||
                       !aligned16(a.residual1))) ||
      (a.residual2 && (a.residual2_stride < a.out_channels || a.residual2_stride % 8 ||
                       !aligned16(a.residual2)))) {
    return cudaErrorInvalidValue;
  }
  for (int o = 0; o < a.outputs; ++o) {
    if (!a.out[o] || !aligned16(a.out[o]) || a.out_stride[o] < a.out_channels ||
        a.out_stride[o] % 8) {
      return cudaErrorInvalidValue;
    }
  }
  if (int64_t(a.frames) * a.height * a.width == 0) return cudaSuccess;
  // 64 output channels per block where the weights fit beside the pipeline, else two groups
  // of 32 (the same tile's two blocks run side by side and share its input in L2).
  const bool wide = !(a.variant & 1) && a.out_channels == 64 &&
                    smem_bytes(a.in_channels, 64, 2) <= size_t(kMaxSmem);
  return dtype == EsrganDType::kFloat16 ? launch_choice<__half>(a, stream, wide)
                                        : launch_choice<__nv_bfloat16>(a, stream, wide);
}

}  // namespace wm::models::cuda
