// wmbench upscale --devices: a batch of inputs upscaled data-parallel (one input lane per
// device, or per CPU rank) against the same batch on one device, in the same run. Prints one JSON
// object: fps of both, the speed-up, per-device busy time and per-stage seconds, so that what
// bounds the speed-up (decode, model, encode) can be named.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/thread_budget.h"
#include "scheduler/progress.h"
#include "scheduler/runner.h"
#include "src/base/fs.h"
#include "src/base/json_text.h"
#include "src/models/realesrgan/realesrgan.h"
#include "tools/bench.h"
#include "tools/bench_args.h"
#include "tools/bench_clip.h"
#include "tools/bench_encode_ceiling.h"
#include "tools/bench_job.h"
#include "tools/bench_thread_cpu.h"

namespace {

const char* kAbout =
    "  A batch of --inputs copies of one clip (--input, or made in process: a moving pattern\n"
    "  with noise, --make) upscaled by one job on the first device alone, then by one job on all\n"
    "  of them (one input lane per device: parallel {mode: data}), in this process, after\n"
    "  --warmup untimed runs of the batch on all devices. --devices cpu --ranks N: N in-process\n"
    "  CPU ranks (one: the first run; default 2). --model: a Real-ESRGAN architecture\n"
    "  (realesr-animevideov3, RealESRGAN_x4plus, ...) with random weights instead of --kind.\n"
    "  --scale: the output scale, as model.scale in a job (default 2 for --kind, the network's\n"
    "  for --model; another one resizes the network's output). JSON: fps of both runs,\n"
    "  speed_up, per-device busy seconds and busy share of the wall time, per-stage seconds\n"
    "  summed over the inputs and their share of the lanes' time (decode: stage_source or\n"
    "  stage_decode, model (host<->device copies included): stage_model, encode: stage_sink or\n"
    "  stage_encode, + writer_finish), `bound`, the stage with the largest share in the run on\n"
    "  all devices, and cpu_seconds / host_cpu_share, the process's CPU time over the run and\n"
    "  its share of all the host's cores (also per ceiling split); inputs_started_seconds_finish:\n"
    "  per input, when it started, its seconds and its output's finish among them. --lanes N:\n"
    "  the jobs' parallel.inputs (inputs at once; 0 = auto: one per device, more on a GPU once\n"
    "  the first input's peak memory shows room); input_lanes in the JSON is what each run used.\n"
    "  --encode-threads N: the jobs' encode.threads (0: the host thread budget's; a list: see\n"
    "  --repeat).\n"
    "  --decode software|nvdec|auto: the jobs' decode (NVDEC frees the cores an encode-bound\n"
    "  batch decodes its inputs with; the ceiling's frames are decoded before it is timed).\n"
    "  encode_ceiling: the run's frames (the job on all devices once more, untimed, writing\n"
    "  FFV1), decoded into memory first, encoded in as many lanes with the same encoder\n"
    "  settings, with the lanes' thread budget\n"
    "  and with the encoder's own threads (splits: both; the faster is the ceiling: the\n"
    "  encoder alone, the host's ceiling for this output); of_ceiling: the run's fps over it.\n"
    "  --encode-threads N,.. with --repeat R: R rounds, each the job once per count and the\n"
    "  ceiling's split once (the first round: the runs above), interleaved; rounds: each\n"
    "  job's fps against its round's ceiling; of_ceiling_median per count.\n"
    "  --ceiling-threads N,..: only these splits (0: the encoder's auto). --skip-one: no run\n"
    "  on the first device alone (no speed_up; for one device, where both runs are the same).\n"
    "  cores_busy (the run on all devices and the ceiling): the cores busy per quarter second,\n"
    "  the encoders' threads and the others.\n";

struct Run {
  double seconds = 0;
  int64_t frames = 0;
  int lanes = 1;
  std::map<std::string, double> busy;    // device_<dev>_busy_seconds, summed over inputs
  std::map<std::string, double> stages;  // stage and writer seconds, summed over inputs
  double cpu_seconds = 0;                // the process's user + system time during the run
  nlohmann::json timeline = nlohmann::json::array();  // per input: started, seconds, finish
  std::map<std::string, double> cpu_by_thread;        // CPU seconds by thread name (role)
  wm::bench::ThreadCpuSampler::Busy busy_cores;       // cores busy over the run, per bucket
};

constexpr double kBucketSeconds = 0.25;

// The cores busy in each quarter second, the encoders' threads and the others (one decimal).
nlohmann::json busy_json(const wm::bench::ThreadCpuSampler::Busy& busy) {
  auto round = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const double x : v) a.push_back(std::round(10 * x) / 10);
    return a;
  };
  return {{"bucket_seconds", kBucketSeconds},
          {"encode", round(busy.encode)},
          {"other", round(busy.other)}};
}

// The host's cores busy on average over `seconds` of wall time, as a share of all of them.
double host_cpu_share(double cpu_seconds, double seconds) {
  return cpu_seconds / (std::max(seconds, 1e-9) * wm::parallel::host_cores());
}

// Runs the job file; exits on failure.
Run run_job(const std::string& yaml_path) {
  Run run;
  const double cpu_before = wm::sched::process_cpu_seconds();
  wm::bench::ThreadCpuSampler sampler;
  const std::vector<wm::sched::JobOutcome> outcomes =
      wm::bench::run_job_or_exit(yaml_path, &run.seconds);
  run.cpu_by_thread = sampler.stop();
  run.busy_cores = sampler.timeline(kBucketSeconds);
  run.cpu_seconds = wm::sched::process_cpu_seconds() - cpu_before;
  for (const auto& o : outcomes) {
    run.frames += o.frames;
    run.lanes = std::max(run.lanes, o.input_lanes);
    for (const auto& in : o.inputs) {
      const auto finish = in.metrics.find("writer_finish_seconds");
      run.timeline.push_back(
          {in.started, in.seconds, finish == in.metrics.end() ? 0.0 : finish->second});
      for (const auto& [name, value] : in.metrics) {
        if (name.rfind("device_", 0) == 0 && name.find("_busy_seconds") != std::string::npos) {
          run.busy[name] += value;
        } else if (name.rfind("stage_", 0) == 0 || name.rfind("writer_", 0) == 0 ||
                   name == "sink_extract_seconds") {
          run.stages[name] += value;
        }
      }
    }
  }
  return run;
}

nlohmann::json describe(const Run& run) {
  nlohmann::json j = {{"seconds", run.seconds},
                      {"frames", run.frames},
                      {"fps", run.frames / run.seconds},
                      {"input_lanes", run.lanes},
                      {"cpu_seconds", run.cpu_seconds},
                      // Near 1: the host's cores are the bound; well below with a stage "bound"
                      // at ~100 %: that stage waits (an encoder's threads on each other).
                      {"host_cpu_share", host_cpu_share(run.cpu_seconds, run.seconds)}};
  nlohmann::json busy = nlohmann::json::object(), share = nlohmann::json::object();
  for (const auto& [name, value] : run.busy) {
    busy[name] = value;
    share[name] = value / run.seconds;
  }
  j["device_busy_seconds"] = busy;
  j["device_busy_share"] = share;
  nlohmann::json stages = nlohmann::json::object(), stage_share = nlohmann::json::object();
  for (const auto& [name, value] : run.stages) {
    stages[name] = value;
    stage_share[name] = value / (run.seconds * run.lanes);
  }
  j["stage_seconds"] = stages;
  j["stage_share_of_lanes"] = stage_share;
  // When each input started (from the job's start), its seconds and the part of them its output's
  // finish took (the encoder's flush: the lane's next input runs meanwhile).
  j["inputs_started_seconds_finish"] = run.timeline;
  // Where the CPU went, by thread role (src/base/thread_name.h: wm-encode, wm-decode, wm-read,
  // wm-lane; other names are LibTorch's, CUDA's or the main thread's).
  nlohmann::json by_thread = nlohmann::json::object();
  for (const auto& [name, value] : run.cpu_by_thread) {
    if (value >= 0.01) by_thread[name] = value;
  }
  j["cpu_seconds_by_thread"] = by_thread;
  // When the cores were busy: a batch's start and its lanes' ends against the steady middle.
  j["cores_busy"] = busy_json(run.busy_cores);
  // The pipeline's stages run at once: the one busy for the largest share of the lanes' time
  // bounds the run (encode = the sink stage plus the writer's finish after it).
  const auto stage = [&](const char* key) {
    const auto it = run.stages.find(key);
    return it == run.stages.end() ? 0.0 : it->second;
  };
  // The graph's names (source, sink) and the device frame path's (decode, encode).
  const std::map<std::string, double> named = {
      {"decode", stage("stage_source_seconds") + stage("stage_decode_seconds")},
      {"model", stage("stage_model_seconds")},
      {"encode", stage("stage_sink_seconds") + stage("stage_encode_seconds") +
                     stage("writer_finish_seconds")}};
  std::string bound;
  double most = -1;
  for (const auto& [name, value] : named) {
    if (value > most) {
      most = value;
      bound = name;
    }
  }
  j["bound"] = bound;
  return j;
}

}  // namespace

int bench_upscale_devices(int argc, char** argv) {
  std::string devices, input, kind = "lanczos", model, precision;
  std::string codec = "libx264", preset = "veryfast", workdir = "/tmp/wmbench-devices";
  std::string decode = "software";
  std::vector<int> job_threads{0}, wanted_threads;  // --encode-threads, --ceiling-threads
  bool skip_one = false;
  wm::bench::ClipShape make{1920, 1080, 48};
  int ranks = 0, inputs = 8, scale = 0, crf = 18, slice_frames = 0, warmup = 1, lanes = 0,
      repeat = 1;
  wm::bench::Args args("wmbench upscale", kAbout);
  args.text("--devices", &devices, "0,1,..|cpu")
      .integer("--ranks", &ranks, 0, "N")
      .integer("--inputs", &inputs, 1)
      .custom("--make", "WxH:FRAMES",
              [&](const std::string& v) { make = wm::bench::parse_clip_shape("--make", v); })
      .text("--input", &input, "FILE")
      .text("--kind", &kind, "lanczos|bicubic")
      .integer("--scale", &scale, 1, "S")
      .text("--model", &model, "NAME")
      .text("--precision", &precision, "fp16|bf16|fp32")
      .text("--codec", &codec)
      .text("--preset", &preset)
      .integer("--crf", &crf, 0)
      .integer("--slice-frames", &slice_frames, 0)
      .integer("--lanes", &lanes, 0)
      .integers("--encode-threads", &job_threads, 0, "N,..")
      .integer("--repeat", &repeat, 1)
      .text("--decode", &decode, "software|nvdec|auto")
      .integers("--ceiling-threads", &wanted_threads, 0, "N,..")
      .toggle("--skip-one", &skip_one)
      .integer("--warmup", &warmup, 0)
      .text("--workdir", &workdir, "DIR");
  if (const int status = args.parse(argc, argv); status >= 0) return status;
  if (devices.empty()) return args.fail("--devices is required");
  int model_scale = scale > 0 ? scale : 2;
  if (!model.empty()) {
    try {
      model_scale = scale > 0 ? scale : wm::models::realesrgan_preset(model).scale;
    } catch (const std::exception& e) {
      return args.fail(std::string("--model: ") + e.what());
    }
  }
  if (job_threads.empty()) return args.fail("--encode-threads: at least one count");
  const bool cpu = devices == "cpu";
  std::vector<std::string> ids;
  if (!cpu) {
    for (size_t at = 0; at <= devices.size();) {
      const size_t comma = std::min(devices.find(',', at), devices.size());
      ids.push_back(devices.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (cpu && ranks < 1) ranks = 2;
  std::filesystem::create_directories(workdir + "/in");
  workdir = std::filesystem::absolute(workdir).string();

  // The clip, copied once per input (distinct files, as a batch has).
  if (input.empty()) {
    const int w = make.width, h = make.height, n = make.count;
    input = workdir + "/clip_" + std::to_string(w) + "x" + std::to_string(h) + "_" +
            std::to_string(n) + ".mp4";
    if (!std::filesystem::exists(input)) {
      wm::bench::write_synthetic_clip(input, w, h, n, "ultrafast", 18);
    }
  }
  input = std::filesystem::absolute(input).string();
  const std::string ext = std::filesystem::path(input).extension().string();
  std::vector<std::string> copies;
  for (int i = 0; i < inputs; ++i) {
    copies.push_back(workdir + "/in/input" + std::to_string(i) + ext);
    std::filesystem::copy_file(input, copies.back(),
                               std::filesystem::copy_options::overwrite_existing);
  }

  // model.scale as a job has it: --scale when given, else 2 for a resampler and the network's
  // own scale for a Real-ESRGAN model (another one resizes the network's output).
  std::string model_yaml = "{kind: " + kind + ", scale: " + std::to_string(model_scale) + "}";
  if (!model.empty()) {
    const std::string weights = workdir + "/" + model + ".safetensors";
    if (!std::filesystem::exists(weights)) {
      wm::models::write_random_realesrgan(wm::models::realesrgan_preset(model), weights, 1);
    }
    model_yaml = "{kind: realesrgan, weights: '" + weights +
                 "', scale: " + std::to_string(model_scale) + "}";
  }
  // `lossless`: the same job writing FFV1 into .nut (its frames as the encoder gets them).
  auto job = [&](const std::string& name, const std::string& devices_yaml, int job_ranks,
                 bool lossless = false, int threads = -1) {
    if (threads < 0) threads = job_threads.front();
    std::string yaml = "task: upscale\ninput:\n";
    for (const std::string& c : copies) yaml += "  - '" + c + "'\n";
    yaml += "output: '" + workdir + "/out_" + name + "/{stem}." + (lossless ? "nut" : "mp4") +
            "'\non_exists: overwrite\n";
    yaml += "model: " + model_yaml + "\ndevices: " + devices_yaml + "\n";
    yaml += "parallel: {mode: data, ranks: " + std::to_string(job_ranks) +
            (lanes > 0 ? ", inputs: " + std::to_string(lanes) : std::string()) + "}\n";
    if (!precision.empty()) yaml += "precision: " + precision + "\n";
    yaml += "decode: " + decode + "\n";
    if (slice_frames > 0) yaml += "slice_frames: " + std::to_string(slice_frames) + "\n";
    if (lossless) {
      yaml += "encode: {codec: ffv1}\n";
    } else {
      yaml += "encode: {codec: " + codec + ", preset: " + preset + ", crf: " + std::to_string(crf) +
              (threads > 0 ? ", threads: " + std::to_string(threads) : std::string()) + "}\n";
    }
    const std::string path = workdir + "/" + name + ".yaml";
    wm::fs::write_file_atomic(path, yaml);
    return path;
  };
  std::string all_list = "[";
  for (size_t i = 0; i < ids.size(); ++i) all_list += (i ? ", " : "") + ids[i];
  all_list += "]";
  const std::string one = job("one", cpu ? "cpu" : "[" + ids.front() + "]", 1);
  const std::string all = job("all", cpu ? "cpu" : all_list, cpu ? ranks : int(ids.size()));

  for (int i = 0; i < warmup; ++i) run_job(all);
  const Run single = skip_one ? Run{} : run_job(one);
  const Run spread = run_job(all);
  // The encoder alone on the run's own frames, in its lanes: the same job once more (not timed)
  // writing them losslessly, decoded into memory, then encoded. (Until 2026-11-30 it re-encoded
  // the run's H.264 outputs: frames already through the encoder, which x264 takes faster —
  // 168 fps against the job's 62 on 8 × 96 frames, two H200s — so that ceiling read high.)
  run_job(job("lossless", cpu ? "cpu" : all_list, cpu ? ranks : int(ids.size()), true));
  std::vector<std::string> outputs;
  for (const std::string& c : copies) {
    outputs.push_back(workdir + "/out_lossless/" + std::filesystem::path(c).stem().string() +
                      ".nut");
  }
  // Thread splits, the fastest one the ceiling: the job's (the host budget of its lanes) and
  // the encoder's own choice per lane (x264: 1.5 per core of the whole host). The job's first
  // inputs start with fewer lanes and more threads each, and x264's frame threads wait on each
  // other, so on two H200s (32 cores, 7 lanes) the Lanczos batch ran 34.9 fps against 31.5 for its
  // budget split alone: a ceiling below the job is no ceiling.
  wm::io::EncodeSettings settings;
  settings.codec = codec;
  settings.preset = preset;
  settings.crf = crf;
  const wm::parallel::ThreadBudget budget =
      wm::parallel::thread_budget(wm::parallel::host_cores(), spread.lanes);
  settings.convert_threads = budget.convert_threads;
  wm::bench::EncodeCeiling ceiling;
  wm::bench::ThreadCpuSampler::Busy ceiling_busy;
  nlohmann::json splits = nlohmann::json::array();
  // Four splits: one thread per lane core and 1.5 (the budget's rules before 2026-11-30), the
  // budget's (3 per lane core), and the encoder's own auto in every lane.
  std::vector<int> tries{budget.lane_cores, std::max(1, 3 * budget.lane_cores / 2),
                         budget.encoder_threads, 0};
  if (!wanted_threads.empty()) tries = wanted_threads;
  tries.erase(std::unique(tries.begin(), tries.end()), tries.end());
  const wm::bench::DecodedVideos frames =
      wm::bench::decode_videos(outputs, wm::parallel::host_cores());
  for (const int threads : tries) {
    wm::io::EncodeSettings tried = settings;
    tried.threads = threads;
    wm::bench::ThreadCpuSampler sampler;
    const wm::bench::EncodeCeiling c =
        wm::bench::encode_ceiling(frames, workdir + "/out_ceiling", spread.lanes, tried);
    sampler.stop();
    if (!c.skipped.empty()) {
      ceiling = c;
      break;
    }
    splits.push_back({{"encoder_threads", threads},
                      {"fps", double(c.frames) / c.seconds},
                      {"host_cpu_share", host_cpu_share(c.cpu_seconds, c.seconds)}});
    if (ceiling.frames == 0 || c.seconds < ceiling.seconds) {
      ceiling = c;
      ceiling_busy = sampler.timeline(kBucketSeconds);
      settings.threads = threads;
    }
  }

  nlohmann::json result = {{"bench", "upscale-devices"},
                           {"input", input},
                           {"frames_per_input", wm::io::VideoReader(input).info().frames_estimate},
                           {"inputs", inputs},
                           {"devices", devices},
                           {"ranks", cpu ? ranks : int(ids.size())},
                           {"model", model.empty() ? kind : model},
                           {"scale", model_scale},
                           {"encode", codec + " " + preset + " crf " + std::to_string(crf)},
                           {"decode", decode},
                           {"encode_threads", job_threads.front()},  // 0: the thread budget's
                           {"cores", int(std::thread::hardware_concurrency())},
                           {"all_devices", describe(spread)}};
  if (!skip_one) {
    result["one_device"] = describe(single);
    result["speed_up"] = single.seconds / spread.seconds;
  }
  if (ceiling.skipped.empty()) {
    result["encode_ceiling"] = {{"seconds", ceiling.seconds},
                                {"frames", ceiling.frames},
                                {"fps", ceiling.frames / ceiling.seconds},
                                {"lanes", ceiling.lanes},
                                {"encoder_threads", settings.threads},  // 0: the encoder's
                                {"source", "the job's frames, lossless (FFV1)"},
                                {"splits", splits},
                                {"cores_busy", busy_json(ceiling_busy)}};
    // The job on all devices against the encoder alone, same frames and lanes.
    result["of_ceiling"] = ceiling.seconds / spread.seconds;
    // Rounds: the job (each --encode-threads count) and the ceiling's split again, interleaved,
    // each job against the ceiling of its own round: on a shared host the same ceiling ran 53.8
    // to 60.9 fps within minutes (one H200, 2026-12-01), so one pair says little.
    if (repeat > 1 || job_threads.size() > 1) {
      nlohmann::json rounds = nlohmann::json::array();
      std::map<int, std::vector<double>> ratios;
      for (int r = 0; r < repeat; ++r) {
        nlohmann::json jobs = nlohmann::json::array();
        std::vector<std::pair<int, Run>> runs;
        for (size_t t = 0; t < job_threads.size(); ++t) {
          if (r == 0 && t == 0) {
            runs.emplace_back(job_threads[t], spread);
          } else {
            runs.emplace_back(job_threads[t],
                              run_job(job("all", cpu ? "cpu" : all_list,
                                          cpu ? ranks : int(ids.size()), false, job_threads[t])));
          }
        }
        const wm::bench::EncodeCeiling c =
            r == 0 ? ceiling
                   : wm::bench::encode_ceiling(frames, workdir + "/out_ceiling", spread.lanes,
                                               settings);
        for (const auto& [threads, run] : runs) {
          const double of = c.seconds / run.seconds;
          ratios[threads].push_back(of);
          jobs.push_back({{"encode_threads", threads},
                          {"fps", run.frames / run.seconds},
                          {"cpu_seconds", run.cpu_seconds},
                          {"host_cpu_share", host_cpu_share(run.cpu_seconds, run.seconds)},
                          {"of_ceiling", of}});
        }
        rounds.push_back({{"ceiling_fps", c.frames / c.seconds},
                          {"ceiling_cpu_seconds", c.cpu_seconds},
                          {"ceiling_host_cpu_share", host_cpu_share(c.cpu_seconds, c.seconds)},
                          {"jobs", jobs}});
      }
      nlohmann::json medians = nlohmann::json::array();
      for (const int threads : job_threads) {
        medians.push_back(
            {{"encode_threads", threads}, {"of_ceiling", wm::bench::median(ratios[threads])}});
      }
      result["rounds"] = rounds;
      result["of_ceiling_median"] = medians;
    }
  } else {
    result["encode_ceiling"] = {{"skipped", ceiling.skipped}};
  }
  std::printf("%s\n", wm::json_dump(result, 2).c_str());
  return 0;
}
