// wmbench vae-decode: times the Wan2.1 VAE decoder (random weights, no file needed) on random
// latents and prints one JSON object.
//
//   wmbench vae-decode [--dim 96|16] [--latent-frames T] [--height H] [--width W]
//                      [--dtype fp32|bf16|fp16] [--device cpu|cuda:N] [--warmup N] [--iters N]
//                      [--slice-frames S] [--threads N] [--seed N]
//
// H and W are output pixels (multiples of 8). --slice-frames S decodes the T latent frames as
// consecutive slices of S (0: one slice), exactly as the job runner would. Timing covers decode
// only: from the input planar on the host to the output planar on the host (which synchronises
// the device), excluding model construction.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "src/base/error.h"
#include "src/model.h"
#include "src/models/wan21_bench_support.h"
#include "src/models/wan21_vae.h"
#include "tools/bench.h"

namespace {

struct Options {
  int dim = 96;
  int latent_frames = 5;
  int height = 256;
  int width = 256;
  std::string dtype = "fp32";
  std::string device = "cpu";
  int warmup = 1;
  int iters = 3;
  int slice_frames = 0;
  int threads = 0;
  uint64_t seed = 1;
};

const char* kUsage =
    "usage: wmbench vae-decode [--dim 96|16] [--latent-frames T] [--height H] [--width W]\n"
    "                          [--dtype fp32|bf16|fp16] [--device cpu|cuda:N] [--warmup N]\n"
    "                          [--iters N] [--slice-frames S] [--threads N] [--seed N]\n";

// Throws std::invalid_argument with a one-line reason.
Options parse(int argc, char** argv) {
  Options o;
  auto integer = [](const std::string& flag, const std::string& v, int min) {
    size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || used == 0 || x < min) {
      throw std::invalid_argument(flag + ": expected an integer >= " + std::to_string(min) +
                                  ", got '" + v + "'");
    }
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") throw std::invalid_argument("");
    if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value");
    const std::string v = argv[++i];
    if (flag == "--dim") {
      o.dim = integer(flag, v, 2);
    } else if (flag == "--latent-frames") {
      o.latent_frames = integer(flag, v, 1);
    } else if (flag == "--height") {
      o.height = integer(flag, v, 8);
    } else if (flag == "--width") {
      o.width = integer(flag, v, 8);
    } else if (flag == "--dtype") {
      o.dtype = v;
    } else if (flag == "--device") {
      o.device = v;
    } else if (flag == "--warmup") {
      o.warmup = integer(flag, v, 0);
    } else if (flag == "--iters") {
      o.iters = integer(flag, v, 1);
    } else if (flag == "--slice-frames") {
      o.slice_frames = integer(flag, v, 0);
    } else if (flag == "--threads") {
      o.threads = integer(flag, v, 0);
    } else if (flag == "--seed") {
      o.seed = uint64_t(integer(flag, v, 0));
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.height % 8 != 0 || o.width % 8 != 0) {
    throw std::invalid_argument(
        "--height and --width are output pixels and must be multiples of 8");
  }
  if (o.dtype != "fp32" && o.dtype != "bf16" && o.dtype != "fp16") {
    throw std::invalid_argument("--dtype: expected fp32, bf16 or fp16, got '" + o.dtype + "'");
  }
  return o;
}

wm::Device parse_device(const std::string& s) {
  wm::Device d;
  if (s == "cpu") return d;
  if (s.rfind("cuda", 0) == 0) {
    d.kind = wm::Device::Kind::kCuda;
    d.index = s.size() > 5 && s[4] == ':' ? std::stoi(s.substr(5)) : 0;
    return d;
  }
  throw std::invalid_argument("--device: expected cpu or cuda:N, got '" + s + "'");
}

wm::Precision parse_precision(const std::string& s) {
  if (s == "bf16") return wm::Precision::kBFloat16;
  if (s == "fp16") return wm::Precision::kFloat16;
  return wm::Precision::kFloat32;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace

int bench_vae_decode(int argc, char** argv) {
  Options o;
  wm::Device device;
  try {
    o = parse(argc, argv);
    device = parse_device(o.device);
  } catch (const std::invalid_argument& e) {
    if (*e.what()) std::cerr << "wmbench vae-decode: " << e.what() << "\n";
    std::cerr << kUsage;
    return wm::kExitUsage;
  }

  try {
    wm::models::set_cpu_threads(o.threads);
    wm::ModelConfig config;
    config.kind = "wan2.1-vae";
    config.task = "decode";
    config.dim = o.dim;
    config.precision = parse_precision(o.dtype);
    auto model = wm::models::make_wan21_vae_random(config, device, o.seed);
    auto session = model->open_session(device);

    const wm::ModelTraits& traits = model->traits();
    wm::Planar latents(traits.in_channels, o.latent_frames, o.height / traits.scale_num,
                       o.width / traits.scale_num);
    std::mt19937 rng(uint32_t(o.seed));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float& v : latents.data) v = normal(rng);

    const int slice =
        o.slice_frames > 0 ? std::min(o.slice_frames, o.latent_frames) : o.latent_frames;
    const int64_t frames_out = model->output_frames(o.latent_frames);
    double total = 0, best = 1e300;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      // Slices are prepared outside the timed region.
      std::vector<wm::Planar> slices;
      for (int t0 = 0; t0 < o.latent_frames; t0 += slice) {
        const int n = std::min(slice, o.latent_frames - t0);
        wm::Planar s(latents.channels, n, latents.height, latents.width);
        for (int c = 0; c < latents.channels; ++c) {
          std::copy_n(latents.plane(c, t0), size_t(n) * latents.plane_size(), s.plane(c, 0));
        }
        slices.push_back(std::move(s));
      }
      if (it == o.warmup) wm::models::reset_peak_device_memory(device);
      int64_t frames = 0;
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < slices.size(); ++i) {
        wm::RunContext ctx;
        ctx.slice_index = int64_t(i);
        ctx.first_slice = i == 0;
        ctx.last_slice = i + 1 == slices.size();
        frames += session->run(std::move(slices[i]), ctx).frames;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (frames != frames_out) {
        throw wm::ModelError("bench: decoded " + std::to_string(frames) + " frames, expected " +
                             std::to_string(frames_out));
      }
      if (it >= o.warmup) {
        total += seconds;
        best = std::min(best, seconds);
      }
    }
    const double seconds = total / o.iters;

    nlohmann::ordered_json out;
    out["bench"] = "vae-decode";
    out["dim"] = o.dim;
    out["dtype"] = o.dtype;
    out["device"] = device.str();
    out["out_width"] = o.width;
    out["out_height"] = o.height;
    out["latent_frames"] = o.latent_frames;
    out["slice_frames"] = slice;
    out["frames"] = frames_out;
    out["iters"] = o.iters;
    out["seconds"] = seconds;
    out["best_seconds"] = best;
    out["fps"] = double(frames_out) / seconds;
    out["cpu_threads"] = wm::models::cpu_threads();
    out["peak_rss_mib"] = peak_rss_mib();
    if (device.kind == wm::Device::Kind::kCuda) {
      out["peak_gpu_mib"] = wm::models::peak_device_memory_mib(device);
    }
    std::cout << out.dump() << std::endl;
    return 0;
  } catch (const wm::Error& e) {
    std::cerr << "wmbench vae-decode: " << e.what() << "\n";
    return e.exit_code();
  }
}
