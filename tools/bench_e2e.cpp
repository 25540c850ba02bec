// wmbench e2e: a whole Real-ESRGAN upscale job (decode → model → encode) and, in the same call,
// its two ceilings: the model alone (the same frame size, precision, frames per call and resize,
// on device-resident frames) and the encoder alone (the job's own frames, written losslessly once
// more and decoded into memory first, encoded with the same codec settings, instances and threads).
// A built-in resampler (`--model lanczos|bicubic`, the CPU path of docs/performance.md) has no
// model-alone ceiling here: its job is set against the encoder alone. --repeats N runs N pairs
// of (job, encoder alone) in turn and reports their medians, the ratio pair by pair ("job" keeps
// the first run's meters): the encoder-alone ceiling moved 12–15 % between runs on some hosts.
// Prints one JSON object: the job's fps, each ceiling, ratio = job / min(ceilings), the GPU's busy
// share, the per-stage meters and `bound` of the job's report. docs/performance.md, "The device
// frame path".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/encoder_check.h"
#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/thread_budget.h"
#include "scheduler/runner.h"
#include "scheduler/segment_encode.h"
#include "scheduler/upscale_device.h"
#include "src/job_spec.h"
#include "src/models/realesrgan/realesrgan.h"
#include "src/models/realesrgan/realesrgan_bench_support.h"
#include "tools/bench.h"
#include "tools/bench_args.h"
#include "tools/bench_clip.h"
#include "tools/bench_job.h"

namespace {

const char* kAbout =
    "  --model: realesr-animevideov3|RealESRGAN_x4plus|... A generated WxH clip (25 fps, --frames\n"
    "  frames; --inputs copies of it as one batch) through a job with random weights (model.scale\n"
    "  S, default the network's: the output is WxH times S), timed after --warmup untimed runs of\n"
    "  the job on its first input; then the model alone (--calls calls of --slice-frames frames)\n"
    "  and the encoder alone (the job's frames, written once more losslessly, decoded into memory\n"
    "  and encoded with the same settings; for a batch, its input lanes' encoders at once). Prints "
    "job_fps, model_fps,\n"
    "  encoder_fps, ratio = job / min(model, encoder), gpu_busy_share, bound, the job's stage\n"
    "  meters. Sizes default to 1920x1080 (SRVGG) and 960x540 (RRDB). --model lanczos|bicubic:\n"
    "  a built-in resampler (scale S, default 2), set against the encoder alone only.\n"
    "  --repeats N: N pairs of (job, encoder alone) in turn; job_fps, the encoder's fps and ratio\n"
    "  are then the medians (the ratio's pair by pair), each pair under \"pairs\".\n";

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct JobRun {
  double seconds = 0;
  int64_t frames = 0;
  int lanes = 1;
  std::vector<wm::sched::InputOutcome> inputs;
};

JobRun run_yaml(const std::string& yaml) {
  JobRun run;
  const std::vector<wm::sched::JobOutcome> outcomes =
      wm::bench::run_job_or_exit(yaml, &run.seconds);
  for (const auto& o : outcomes) {
    run.frames += o.frames;
    run.lanes = std::max(run.lanes, o.input_lanes);
    run.inputs.insert(run.inputs.end(), o.inputs.begin(), o.inputs.end());
  }
  return run;
}

// The encoder alone: `frames` (decoded pictures of the job's output) encoded `copies` times at
// once, each as the job encoded one input (one writer, or the segment instances). Returns fps
// over all copies.
double encoder_alone(const std::vector<std::pair<wm::io::VideoFrame, wm::io::YuvImage>>& frames,
                     const wm::io::VideoInfo& info, const wm::EncodeSpec& spec,
                     const wm::sched::HostBudget& budget, int copies, const std::string& workdir,
                     double& seconds) {
  auto encode = [&](int copy) {
    wm::io::WriterConfig c;
    c.path = workdir + "/encoder_alone_" + std::to_string(copy) + ".mp4";
    c.width = info.width;
    c.height = info.height;
    c.time_base = info.time_base;
    c.frame_rate = info.frame_rate;
    c.source = info;
    c.encode.codec = spec.codec;
    c.encode.crf = spec.crf;
    c.encode.preset = spec.preset;
    c.encode.threads = budget.instances > 1 ? budget.encoder_threads : spec.threads;
    c.encode.options = spec.options;
    c.encode.copy_audio = c.encode.copy_subtitles = c.encode.copy_other = false;
    if (budget.instances > 1) {
      wm::sched::SegmentOptions o;
      o.instances = budget.instances;
      o.segment_frames =
          wm::sched::segment_frames_for(info.frame_rate, int64_t(frames.size()), o.instances);
      wm::sched::SegmentEncoder encoder(c, o);
      for (const auto& [t, image] : frames) encoder.write(t, image);
      encoder.finish();
    } else {
      wm::io::VideoWriter writer(c);
      for (const auto& [t, image] : frames) writer.write_planes(t, image);
      writer.finish();
    }
    std::filesystem::remove(c.path);
  };
  const double t0 = now();
  std::vector<std::thread> threads;
  for (int i = 1; i < copies; ++i) threads.emplace_back(encode, i);
  encode(0);
  for (std::thread& t : threads) t.join();
  seconds = now() - t0;
  return double(frames.size()) * copies / seconds;
}

}  // namespace

int bench_e2e(int argc, char** argv) {
  std::string model, size, precision = "fp16", codec = "libx264";
  std::string preset = "veryfast", instances = "auto", frame_path = "auto", decode = "software";
  std::string tuning, workdir = "/tmp/wmbench-e2e";
  int frames = 100, scale = 0, crf = 18, inputs = 1, slice_frames = 4, warmup = 1, calls = 10;
  int repeats = 1;
  wm::Device device{wm::Device::Kind::kCuda, 0};
  wm::bench::Args args("wmbench e2e", kAbout);
  args.text("--model", &model, "NAME")
      .frame_size("--size", &size)
      .integer("--frames", &frames, 1)
      .integer("--scale", &scale, 1, "S")
      .choice("--precision", &precision, {"fp16", "bf16", "fp32"})
      .custom("--device", "cuda:0|cpu",
              [&](const std::string& v) { device = wm::bench::parse_device(v); })
      .text("--codec", &codec)
      .text("--preset", &preset)
      .integer("--crf", &crf, 0)
      .custom("--instances", "auto|N",
              [&](const std::string& v) {
                if (v != "auto") wm::bench::parse_int("--instances", v, 1);  // checked
                instances = v;
              })
      .integer("--inputs", &inputs, 1)
      .integer("--slice-frames", &slice_frames, 1)
      .choice("--frame-path", &frame_path, {"auto", "device", "host"})
      .choice("--decode", &decode, {"software", "nvdec"})
      .integer("--warmup", &warmup, 0)
      .integer("--calls", &calls, 1)
      .integer("--repeats", &repeats, 1, "N")
      .text("--tuning", &tuning, "T")
      .text("--workdir", &workdir, "DIR");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  const bool resampler = model == "lanczos" || model == "bicubic";
  wm::models::RealEsrganArch arch;
  if (!resampler) {
    try {
      arch = wm::models::realesrgan_preset(model);
    } catch (const std::exception& e) {
      return args.fail(std::string("--model: ") + e.what() + "; or lanczos, bicubic");
    }
  }
  if (size.empty()) {
    size = resampler || arch.family == wm::models::RealEsrganArch::Family::kSrvgg ? "1920x1080"
                                                                                  : "960x540";
  }
  const auto [width, height] = wm::bench::parse_size("--size", size);
  if (scale <= 0) scale = resampler ? 2 : arch.scale;
  const bool cuda = device.kind == wm::Device::Kind::kCuda;
  nlohmann::json result = {
      {"bench", "e2e"},
      {"model", model},
      {"arch", resampler ? "built-in resampler" : arch.describe()},
      {"device", device.str()},
      {"precision", precision},
      {"input_size", size},
      {"scale", scale},
      {"output_size", std::to_string(width * scale) + "x" + std::to_string(height * scale)},
      {"frames_per_input", frames},
      {"inputs", inputs},
      {"codec", codec},
      {"preset", preset},
      {"crf", crf},
      {"instances", instances},
      {"frame_path", frame_path},
      {"decode", decode},
      {"slice_frames", slice_frames},
      {"repeats", repeats},
      {"cores", int(std::thread::hardware_concurrency())}};
  if (resampler) result.erase("precision");  // the resamplers run in float32
  if (wm::io::check_encoder(codec, "", {})) {
    result["skipped"] = "encoder " + codec + " is not in this build of libavcodec";
    std::printf("%s\n", result.dump(2).c_str());
    return 0;
  }
  std::filesystem::create_directories(workdir);

  // The clip (written once per size and length) and its copies for a batch.
  const std::string clip = workdir + "/clip_" + size + "_" + std::to_string(frames) + "f.mp4";
  if (!std::filesystem::exists(clip)) {
    wm::bench::write_synthetic_clip(clip, width, height, frames, "veryfast", 20);
  }
  std::vector<std::string> clips = {clip};
  for (int i = 1; i < inputs; ++i) {
    const std::string copy = workdir + "/batch_" + std::to_string(i) + ".mp4";
    std::filesystem::copy_file(clip, copy, std::filesystem::copy_options::overwrite_existing);
    clips.push_back(copy);
  }
  const std::string weights = workdir + "/" + model + "_random.safetensors";
  if (!resampler && !std::filesystem::exists(weights)) {
    wm::models::write_random_realesrgan(arch, weights, 1234);
  }

  // The job, as a job file (the CLI's entry); the warm-up runs its first input alone.
  std::string inputs_text = "[";
  for (size_t i = 0; i < clips.size(); ++i) inputs_text += (i ? ", '" : "'") + clips[i] + "'";
  inputs_text += "]";
  std::string yaml_text = "output: '" + workdir + "/out_{stem}.mp4'\non_exists: overwrite\n";
  if (resampler) {
    yaml_text += "model: {kind: " + model + ", scale: " + std::to_string(scale) + "}\n";
  } else {
    yaml_text += "model: {kind: realesrgan, weights: '" + weights +
                 "', scale: " + std::to_string(scale) +
                 (tuning.empty() ? "" : ", tuning: '" + tuning + "'") + "}\n";
    yaml_text += "precision: " + precision + "\n";
  }
  yaml_text += cuda ? "devices: [" + std::to_string(device.index) + "]\n" : "devices: cpu\n";
  yaml_text += "slice_frames: " + std::to_string(slice_frames) + "\n";
  yaml_text += "frame_path: " + frame_path + "\ndecode: " + decode + "\n";
  // The job's frames as the encoder gets them, for the encoder alone: the same job on the first
  // input writing FFV1 (before 2026-11-30 the encoder alone re-encoded the job's H.264 output,
  // pictures already through x264, which it takes faster: that ceiling read high).
  std::string lossless_text = yaml_text + "encode: {codec: ffv1}\n";
  const size_t output_end = lossless_text.find('\n');
  lossless_text.replace(0, output_end, "output: '" + workdir + "/lossless_{stem}.nut'");
  yaml_text += "encode: {codec: " + codec + ", preset: " + preset +
               ", crf: " + std::to_string(crf) + ", instances: " + instances + "}\n";
  const std::string yaml = workdir + "/e2e.yaml";
  const std::string lossless_yaml = workdir + "/e2e_lossless.yaml";
  std::ofstream(lossless_yaml) << "job: e2e-lossless\ninput: ['" + clip + "']\n" + lossless_text;
  const std::string warm_yaml = workdir + "/e2e_warmup.yaml";
  std::ofstream(yaml) << "job: e2e\ninput: " + inputs_text + "\n" + yaml_text;
  std::ofstream(warm_yaml) << "job: e2e-warmup\ninput: ['" + clip + "']\n" + yaml_text;

  for (int i = 0; i < warmup; ++i) run_yaml(warm_yaml);
  const JobRun job = run_yaml(yaml);
  std::vector<double> job_runs = {job.frames / job.seconds}, encoder_runs;  // fps, in pairs
  nlohmann::json job_json = {{"seconds", job.seconds},
                             {"frames", job.frames},
                             {"fps", job.frames / job.seconds},
                             {"input_lanes", job.lanes}};
  double pipeline_seconds = 0;
  std::map<std::string, double> sums;
  for (const auto& in : job.inputs) {
    for (const auto& [name, value] : in.metrics) sums[name] += value;
    if (!in.bound.empty()) job_json["bound"] = in.bound;  // (the last input's)
    job_json["decoder"] = in.decoder;
  }
  pipeline_seconds = sums["pipeline_seconds"];
  const double n_inputs = double(std::max<size_t>(job.inputs.size(), 1));
  for (const auto& [name, value] : sums) {
    const bool mean = name.rfind("share_", 0) == 0 || name == "gpu_busy_share" ||
                      name == "encoder_instances" || name == "device_lanes" ||
                      name == "frame_path_device";
    job_json["metrics"][name] = mean ? value / n_inputs : value;
  }
  if (pipeline_seconds > 0 && job.lanes <= 1)
    job_json["fps_pipeline"] = job.frames / pipeline_seconds;
  result["job"] = job_json;

  // The model alone: the same frame size, precision, frames per call and resize.
  if (resampler) {
    result["model_alone"] = {{"skipped", "a built-in resampler: set against the encoder alone"}};
  } else {
    try {
      const wm::Precision p = wm::bench::parse_precision(precision);
      const wm::models::RealEsrganBench b =
          wm::models::bench_realesrgan(arch, device, p, slice_frames, height, width,
                                       cuda ? calls : 1, cuda ? 3 : 1, tuning, scale);
      result["model_alone"] = {{"fps", b.fps}, {"tflops", b.tflops}, {"peak_mib", b.peak_mib}};
    } catch (const std::exception& e) {
      result["model_alone"] = {{"error", e.what()}};
    }
  }

  // The encoder alone: the job's frames for its first input (the job once more, writing FFV1),
  // decoded into memory, encoded as the job encoded each input, with as many at once as the job
  // ran input lanes.
  try {
    run_yaml(lossless_yaml);
    const std::string out =
        workdir + "/lossless_" + std::filesystem::path(clip).stem().string() + ".nut";
    wm::io::VideoReader reader(out);
    const wm::io::VideoInfo info = reader.info();
    std::vector<std::pair<wm::io::VideoFrame, wm::io::YuvImage>> planes;
    for (;;) {
      wm::io::VideoFrame t;
      wm::io::YuvImage image;
      if (!reader.read_yuv(t, image)) break;
      planes.emplace_back(std::move(t), image);
    }
    wm::JobSpec spec;
    spec.encode.codec = codec;
    spec.encode.preset = preset;
    spec.encode.crf = crf;
    spec.encode.instances = instances == "auto" ? 0 : std::stoi(instances);
    if (job.lanes > 1) spec.parallel.lane_ranks = 1;
    wm::sched::HostBudget budget = wm::sched::host_budget(
        spec, wm::parallel::thread_budget(int(std::thread::hardware_concurrency()), 1), info.width,
        info.height);
    // The host path and the resamplers' YUV-native path (on the CPU) encode with one writer.
    if (frame_path == "host" || (resampler && !cuda)) budget.instances = 1;
    double seconds = 0;
    double fps = encoder_alone(planes, info, spec.encode, budget, job.lanes, workdir, seconds);
    encoder_runs.push_back(fps);
    // More pairs, each the job and then the encoder alone, so a drift of the host's speed
    // moves both sides of a pair alike.
    for (int r = 1; r < repeats; ++r) {
      const JobRun again = run_yaml(yaml);
      job_runs.push_back(again.frames / again.seconds);
      double s = 0;
      encoder_runs.push_back(
          encoder_alone(planes, info, spec.encode, budget, job.lanes, workdir, s));
    }
    fps = wm::bench::median(encoder_runs);
    seconds = double(planes.size()) * job.lanes / fps;  // the median run's, as its fps
    result["encoder_alone"] = {{"fps", fps},
                               {"seconds", seconds},
                               {"copies_at_once", job.lanes},
                               {"instances", budget.instances},
                               {"threads_each", budget.instances > 1 ? budget.encoder_threads : 0}};
  } catch (const std::exception& e) {
    result["encoder_alone"] = {{"error", e.what()}};
  }

  const double job_fps = wm::bench::median(job_runs);
  double ceiling = 1e30;
  if (result["model_alone"].contains("fps")) {
    ceiling = std::min(ceiling, result["model_alone"]["fps"].get<double>());
  }
  if (result["encoder_alone"].contains("fps")) {
    ceiling = std::min(ceiling, result["encoder_alone"]["fps"].get<double>());
  }
  if (ceiling < 1e30) {
    result["ceiling_fps"] = ceiling;
    result["ratio"] = job_fps / ceiling;
    if (repeats > 1 && encoder_runs.size() == job_runs.size()) {
      const double model =
          result["model_alone"].contains("fps") ? result["model_alone"]["fps"].get<double>() : 1e30;
      std::vector<double> ratios;
      nlohmann::json pairs = nlohmann::json::array();
      for (size_t i = 0; i < job_runs.size(); ++i) {
        ratios.push_back(job_runs[i] / std::min(model, encoder_runs[i]));
        pairs.push_back(
            {{"job_fps", job_runs[i]}, {"encoder_fps", encoder_runs[i]}, {"ratio", ratios.back()}});
      }
      result["pairs"] = pairs;
      result["ratio"] = wm::bench::median(ratios);
    }
    const bool model_slower = result["model_alone"].contains("fps") &&
                              result["model_alone"]["fps"].get<double>() <= ceiling;
    result["slower_ceiling"] = model_slower ? "model" : "encoder";
  }
  result["job_fps"] = job_fps;
  if (job_json.contains("metrics") && job_json["metrics"].contains("gpu_busy_share")) {
    result["gpu_busy_share"] = job_json["metrics"]["gpu_busy_share"];
  }
  std::printf("%s\n", result.dump(2).c_str());
  return 0;
}
