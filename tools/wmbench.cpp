// wmbench: benchmarks that print JSON. Speed and memory targets are checked here, not in tests.
#include <cstdio>
#include <cstring>
#include <string>

#include "io/av_log.h"
#include "src/base/heap.h"
#include "tools/bench.h"

namespace {
const char* kUsage =
    "wmbench BENCH [options]   (each prints one JSON object on stdout)\n"
    "  upscale      wmbatch's upscale job vs the ffmpeg CLI on the same clip\n"
    "  vae-decode   Wan2.1 VAE decode speed and peak memory (random weights)\n"
    "  vae-job      end-to-end decode_latents job (→ H.264) vs decode only (random weights)\n"
    "  seedvr2      SeedVR2 VAE decode/encode speed and peak memory (random weights)\n"
    "  seedvr2-upscale  the whole SeedVR2 upscale of one batch, per stage (random weights)\n"
    "  e2e          a Real-ESRGAN upscale job beside its ceilings: the model alone, the encoder "
    "alone\n"
    "  segments     one encoder against several on segments of one output: speed, size, PSNR\n"
    "  BENCH --help for its options\n";
}

int main(int argc, char** argv) {
  wm::tune_heap_for_frames();
  if (argc < 2 || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 64 : 0;
  }
  wm::io::install_av_log();
  const std::string bench = argv[1];
  if (bench == "upscale") return bench_upscale(argc - 1, argv + 1);
  if (bench == "vae-decode") return bench_vae_decode(argc - 1, argv + 1);
  if (bench == "vae-job") return bench_vae_job(argc - 1, argv + 1);
  if (bench == "seedvr2") return bench_seedvr2(argc - 1, argv + 1);
  if (bench == "seedvr2-upscale") return bench_seedvr2_upscale(argc - 1, argv + 1);
  if (bench == "e2e") return bench_e2e(argc - 1, argv + 1);
  if (bench == "segments") return bench_segments(argc - 1, argv + 1);
  std::fprintf(stderr, "wmbench: unknown benchmark '%s'\n%s", bench.c_str(), kUsage);
  return 64;
}
