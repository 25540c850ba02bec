// wmbench segments: one output encoded by one encoder and by several instances on segments
// (scheduler/segment_encode.h), from the same decoded planes in memory: speed, file size and
// PSNR against the planes of each, and the ratios. Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/segment_encode.h"
#include "scheduler/upscale_device.h"
#include "tools/bench.h"
#include "tools/bench_args.h"
#include "tools/bench_clip.h"

namespace {

const char* kAbout =
    "  Decodes the clip into memory, encodes it with one encoder (--threads) and with\n"
    "  --instances encoders on segments (--segment-frames, 0: up to two seconds, even over the\n"
    "  instances; threads split), and prints fps, bytes and PSNR (Y, U, V against the decoded\n"
    "  planes) of each.\n";

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using Frames = std::vector<std::pair<wm::io::VideoFrame, wm::io::YuvImage>>;

Frames decode(const std::string& path) {
  wm::io::VideoReader reader(path);
  Frames out;
  for (;;) {
    wm::io::VideoFrame t;
    wm::io::YuvImage image;
    if (!reader.read_yuv(t, image)) break;
    out.emplace_back(std::move(t), image);
  }
  return out;
}

// PSNR of each plane of `path`'s pictures against `frames` (8- or 16-bit samples).
std::vector<double> psnr(const Frames& frames, const std::string& path) {
  const Frames got = decode(path);
  std::vector<double> se(3, 0), n(3, 0);
  double peak = 255;
  for (size_t i = 0; i < std::min(frames.size(), got.size()); ++i) {
    const wm::io::YuvImage& a = frames[i].second;
    const wm::io::YuvImage& b = got[i].second;
    peak = double((1 << a.depth) - 1);
    for (int p = 0; p < 3; ++p) {
      for (int y = 0; y < a.plane_height(p); ++y) {
        const uint8_t* ra = a.data[p] + a.stride[p] * y;
        const uint8_t* rb = b.data[p] + b.stride[p] * y;
        for (int x = 0; x < a.plane_width(p); ++x) {
          const int va = a.depth > 8 ? ra[2 * x] | (ra[2 * x + 1] << 8) : ra[x];
          const int vb = b.depth > 8 ? rb[2 * x] | (rb[2 * x + 1] << 8) : rb[x];
          se[size_t(p)] += double(va - vb) * (va - vb);
          n[size_t(p)] += 1;
        }
      }
    }
  }
  std::vector<double> out;
  for (int p = 0; p < 3; ++p) {
    const double mse = se[size_t(p)] / std::max(n[size_t(p)], 1.0);
    out.push_back(mse > 0 ? 10 * std::log10(peak * peak / mse) : 99.0);
  }
  return out;
}

}  // namespace

int bench_segments(int argc, char** argv) {
  std::string input, codec = "libx264", preset = "veryfast";
  std::string workdir = "/tmp/wmbench-segments";
  wm::bench::ClipShape make{1280, 720, 200};
  int instances = 2, segment_frames = 0, crf = 18, threads = 0;
  wm::bench::Args args("wmbench segments", kAbout);
  args.text("--input", &input, "FILE")
      .custom("--make", "WxH:FRAMES",
              [&](const std::string& v) { make = wm::bench::parse_clip_shape("--make", v); })
      .integer("--instances", &instances, 1)
      .integer("--segment-frames", &segment_frames, 0)
      .text("--codec", &codec)
      .text("--preset", &preset)
      .integer("--crf", &crf, 0)
      .integer("--threads", &threads, 0)
      .text("--workdir", &workdir, "DIR");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  std::filesystem::create_directories(workdir);
  if (input.empty()) {
    input = workdir + "/clip_" + std::to_string(make.width) + "x" + std::to_string(make.height) +
            "_" + std::to_string(make.count) + ".mp4";
    if (!std::filesystem::exists(input)) {
      wm::bench::write_synthetic_clip(input, make.width, make.height, make.count, "veryfast", 20);
    }
  }
  const Frames frames = decode(input);
  const wm::io::VideoInfo info = wm::io::VideoReader(input).info();
  if (segment_frames <= 0) {
    segment_frames =
        wm::sched::segment_frames_for(info.frame_rate, int64_t(frames.size()), instances);
  }
  const int cores = int(std::thread::hardware_concurrency());
  wm::io::WriterConfig c;
  c.width = info.width;
  c.height = info.height;
  c.time_base = info.time_base;
  c.frame_rate = info.frame_rate;
  c.source = info;
  c.encode.codec = codec;
  c.encode.preset = preset;
  c.encode.crf = crf;
  c.encode.threads = threads;
  c.encode.copy_audio = c.encode.copy_subtitles = c.encode.copy_other = false;

  nlohmann::json result = {{"bench", "segments"},     {"input", input},
                           {"frames", frames.size()}, {"codec", codec},
                           {"preset", preset},        {"crf", crf},
                           {"cores", cores},          {"segment_frames", segment_frames}};
  auto report = [&](const std::string& name, const std::string& path, double seconds) {
    const std::vector<double> q = psnr(frames, path);
    result[name] = {{"fps", double(frames.size()) / seconds},
                    {"seconds", seconds},
                    {"bytes", std::filesystem::file_size(path)},
                    {"psnr_y", q[0]},
                    {"psnr_u", q[1]},
                    {"psnr_v", q[2]}};
  };
  {
    c.path = workdir + "/one.mp4";
    const double t0 = now();
    wm::io::VideoWriter writer(c);
    for (const auto& [t, image] : frames) writer.write_planes(t, image);
    writer.finish();
    report("one_encoder", c.path, now() - t0);
  }
  {
    c.path = workdir + "/segments.mp4";
    wm::io::WriterConfig each = c;
    each.encode.threads = threads > 0
                              ? std::max(1, threads / instances)
                              : std::max(1, int(std::lround(1.5 * cores / std::max(instances, 1))));
    const double t0 = now();
    wm::sched::SegmentOptions o;
    o.instances = instances;
    o.segment_frames = segment_frames;
    wm::sched::SegmentEncoder encoder(each, o);
    for (const auto& [t, image] : frames) encoder.write(t, image);
    encoder.finish();
    report("segments", c.path, now() - t0);
    result["segments"]["instances"] = instances;
    result["segments"]["threads_each"] = each.encode.threads;
  }
  const auto& one = result["one_encoder"];
  const auto& seg = result["segments"];
  result["speedup"] = seg["fps"].get<double>() / one["fps"].get<double>();
  result["size_ratio"] = seg["bytes"].get<double>() / one["bytes"].get<double>();
  result["psnr_y_delta_db"] = seg["psnr_y"].get<double>() - one["psnr_y"].get<double>();
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}
