#include "scheduler/tasks.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include "io/image_output.h"
#include "io/video_reader.h"
#include "io/video_writer.h"
#include "parallel/device_worker.h"
#include "parallel/devices.h"
#include "parallel/halo_nccl.h"
#include "parallel/placed_session.h"
#include "parallel/sequence_parallel.h"
#include "scheduler/segment_encode.h"
#include "scheduler/slice_overlap.h"
#include "scheduler/upscale_device.h"
#include "scheduler/upscale_yuv.h"
#include "scheduler/video_stages.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/log.h"
#include "src/models/tensor_model.h"

namespace wm::sched {

namespace {
thread_local ModelShelf* t_shelf = nullptr;
}  // namespace

ModelShelf::ModelShelf() : previous_(t_shelf) { t_shelf = this; }
ModelShelf::~ModelShelf() { t_shelf = previous_; }

ModelSet::ModelSet(const ModelConfig& config, const std::string& devices,
                   const std::vector<int>& ids, const ParallelSpec& parallel)
    : parallel_(parallel) {
  const std::vector<Device> all = parallel::resolve_devices(devices, ids);
  const int n = int(all.size());
  const bool cpu = all.front().kind == Device::Kind::kCpu;
  // GPUs: one rank per listed device unless `ranks` says fewer (or, for sequence parallelism on
  // one GPU, more: several streams). CPU: `ranks` in-process ranks.
  int total = parallel.ranks > 0 ? parallel.ranks : (cpu ? 1 : n);
  const bool lane = parallel.lane_ranks > 0;
  const int first = lane ? parallel.first_rank : 0;
  int count = lane ? parallel.lane_ranks : total;

  // The model on a device: from the shelf when one is in use (input lanes share weights).
  auto model_on = [&](const Device& d) -> std::shared_ptr<const Model> {
    if (!t_shelf) return std::shared_ptr<const Model>(make_model(config, d));
    std::shared_ptr<const Model>& m =
        t_shelf->models_[d.str() + "|" + config.kind + "|" + config.task + "|" + config.weights];
    if (!m) m = std::shared_ptr<const Model>(make_model(config, d));
    return m;
  };
  auto add_device = [&](const Device& d) -> size_t {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].str() == d.str()) return i;
    }
    devices_.push_back(d);
    models_.push_back(model_on(d));
    return devices_.size() - 1;
  };
  add_device(all[size_t(first % n)]);  // the traits decide the mode
  const ModelTraits& t = traits();
  switch (parallel.mode) {
    case ParallelMode::kAuto:
      sequence_ = t.causal_state && t.sequence_parallel && count > 1;
      // Time or rows, chosen per video at its first slice (parallel::choose_split).
      split_ = t.spatial_parallel ? parallel::SplitBy::kAuto : parallel::SplitBy::kTime;
      break;
    case ParallelMode::kData:
      sequence_ = false;
      break;
    case ParallelMode::kSequence:
      if (!t.sequence_parallel && !t.split_inside_slices) {
        throw Error("parallel: mode sequence needs a model that splits slices in time; " + t.name +
                        " does not (use data)",
                    kExitDataErr);
      }
      sequence_ = count > 1;
      break;
    case ParallelMode::kSpatial:
      if (!t.spatial_parallel) {
        throw Error(
            "parallel: mode spatial needs a model that splits its frames into bands of rows "
            "(a row halo per convolution); " +
                t.name + " does not" +
                (t.sequence_parallel ? " (its normalisation needs whole-frame statistics: use "
                                       "sequence)"
                 : t.causal_state    ? " (use data)"
                                     : " (use data: its slices spread over the devices)"),
            kExitDataErr);
      }
      sequence_ = count > 1;
      split_ = parallel::SplitBy::kRows;
      break;
  }
  if (!sequence_ && !cpu && !lane) {
    total = std::min(total, n);
    count = total;
  }
  job_ranks_ = total;
  // A causal model in data mode: one session (its slices run in order).
  const int used = sequence_ || !t.causal_state ? count : 1;
  for (int r = first; r < first + used; ++r) {
    Slot slot;
    slot.device = all[size_t(r % n)];
    slot.lane = r / n;
    slot.rank = r;
    slot.model = add_device(slot.device);
    slots_.push_back(slot);
  }
  if (parallel.nccl && sequence_) {
    std::set<std::string> distinct;
    for (const Slot& s : slots_) distinct.insert(s.device.str());
    if (!parallel::nccl_available()) {
      throw Error(
          "parallel: exchange nccl: this build has no NCCL (configure with "
          "-DWMBATCH_WITH_NCCL=ON on a host with CUDA and NCCL; or use in-process)",
          kExitDataErr);
    }
    if (cpu || distinct.size() != slots_.size()) {
      throw Error("parallel: exchange nccl needs a GPU of its own for every rank (" +
                      std::to_string(slots_.size()) + " ranks on " +
                      std::to_string(distinct.size()) + " devices; or use in-process)",
                  kExitDataErr);
    }
  }
  if (!parallel.fault.empty()) {
    parallel::FaultSpec spec;
    try {
      spec = parallel::parse_fault(parallel.fault);
    } catch (const std::invalid_argument& e) {
      throw Error(std::string("parallel: fault ") + e.what(), kExitDataErr);
    }
    if (t_shelf) {
      std::shared_ptr<parallel::Fault>& f = t_shelf->faults_[parallel.fault];
      if (!f) f = std::make_shared<parallel::Fault>(spec);
      fault_ = f;
    } else {
      fault_ = std::make_shared<parallel::Fault>(spec);
    }
  }
}

std::vector<std::unique_ptr<ModelSession>> ModelSet::open_sessions() const {
  std::vector<std::unique_ptr<ModelSession>> sessions;
  if (sequence_) {
    std::vector<std::unique_ptr<ModelSession>> ranks;
    std::vector<parallel::DeviceWorker*> workers;
    for (const Slot& s : slots_) {
      ranks.push_back(models_[s.model]->open_session(s.device));
      workers.push_back(&parallel::device_worker(s.device, s.lane));
    }
    // In-process unless the job asks for NCCL (`parallel.exchange: nccl`; checked when the set
    // was built).
    parallel::SequenceParallelOptions options;
    options.nccl = parallel_.nccl;
    options.timeout = std::chrono::milliseconds(int64_t(parallel_.timeout_seconds * 1000.0));
    options.first_rank = slots_.front().rank;
    options.by = split_;
    options.fault = fault_.get();
    parallel::fit_to_model(options, models_[slots_.front().model]);
    sessions.push_back(std::make_unique<parallel::SequenceParallelSession>(
        std::move(ranks), std::move(workers), options));
    return sessions;
  }
  for (const Slot& s : slots_) {
    sessions.push_back(std::make_unique<parallel::WorkerSession>(
        models_[s.model]->open_session(s.device), parallel::device_worker(s.device, s.lane), s.rank,
        fault_.get(), /*name_rank=*/job_ranks_ > 1 || parallel_.lane_ranks > 0));
  }
  return sessions;
}

void ModelSet::check_rows(const JobSpec& job, const std::string& input,
                          const TilePlan& tiles) const {
  if (!sequence_ || split_ != parallel::SplitBy::kRows) return;
  int rows = tiles.height;
  for (const Span& w : tiles.rows.windows) rows = std::min(rows, w.size());
  if (rows >= 2 * ranks()) return;
  throw Error(job.file + ": parallel: mode spatial needs at least 2 latent rows per rank; " +
                  input + " has " + std::to_string(tiles.height) + " latent rows" +
                  (rows < tiles.height ? " (tiles of " + std::to_string(rows) + ")" : "") +
                  " for " + std::to_string(ranks()) +
                  " ranks (use mode sequence or auto, or fewer ranks)",
              kExitDataErr);
}

std::vector<parallel::DeviceWorker*> ModelSet::workers() const {
  std::vector<parallel::DeviceWorker*> out;
  for (const Slot& s : slots_) out.push_back(&parallel::device_worker(s.device, s.lane));
  return out;
}

DeviceMeter::DeviceMeter(const ModelSet& models) : workers_(models.workers()) {
  for (parallel::DeviceWorker* w : workers_) before_.push_back(w->stats());
}

std::map<std::string, double> DeviceMeter::metrics(
    const std::vector<std::unique_ptr<ModelSession>>& sessions) const {
  std::map<std::string, double> out;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const parallel::DeviceWorker& w = *workers_[i];
    std::string name =
        w.device().kind == Device::Kind::kCuda ? "cuda" + std::to_string(w.device().index) : "cpu";
    if (w.lane() > 0) name += "." + std::to_string(w.lane());
    const parallel::WorkerStats now = w.stats();
    out["device_" + name + "_busy_seconds"] = now.busy_seconds - before_[i].busy_seconds;
    out["device_" + name + "_frames"] = double(now.frames - before_[i].frames);
    if (now.peak_memory_mib >= 0) out["device_" + name + "_peak_mib"] = now.peak_memory_mib;
  }
  for (const auto& s : sessions) {
    if (auto* sp = dynamic_cast<const parallel::SequenceParallelSession*>(s.get())) {
      const parallel::ExchangeStats e = sp->exchange_stats();
      out["exchange_bytes"] += double(e.bytes);
      out["exchange_wait_seconds"] += e.wait_seconds;
      // What carried the messages (1: NCCL; 0: in-process, also where NCCL was asked for and
      // CUDA loads kernels lazily: parallel/halo_nccl.h).
      out["exchange_nccl"] = std::string(sp->exchange_kind()) == "nccl" ? 1 : 0;
      out["parallel_sequence_slices"] += double(sp->time_slices());
      out["parallel_spatial_slices"] += double(sp->row_slices());
      // Of the time split's, those run on one rank alone (a rank could not hold the state).
      out["parallel_solo_slices"] += double(sp->solo_slices());
      // Auto's choice and the predicted speed-ups it was made from (the log has the sentence).
      if (const parallel::SplitPrediction* p = sp->last_prediction()) {
        out["parallel_auto_rows"] = p->rows ? 1 : 0;
        out["parallel_predicted_time_speedup"] = p->time_speedup;
        out["parallel_predicted_rows_speedup"] = p->rows_speedup;
      }
    }
  }
  return out;
}

std::vector<Device> ModelSet::session_devices() const {
  if (sequence_) return {slots_.front().device};
  std::vector<Device> out;
  for (const Slot& s : slots_) out.push_back(s.device);
  return out;
}

TilePlan plan_job_tiles(const JobSpec& job, const ModelTraits& traits, int width, int height) {
  const TilingSpec& t = job.tiling;
  const bool tiled = t.enabled && !t.automatic;
  // A model that makes the short side a given size: that ratio, per input.
  const int num = traits.target_short_side > 0 ? traits.target_short_side : traits.scale_num;
  const int den =
      traits.target_short_side > 0 ? std::max(1, std::min(width, height)) : traits.scale_den;
  if (tiled && (traits.target_short_side > 0 || traits.slice_overlap > 0)) {
    throw ConfigError(job.file, job.line, "tiling",
                      "kind " + job.model.kind + " runs whole frames (use tiling: none)");
  }
  try {
    return plan_tiles(width, height, tiled ? t.tile_width : 0, tiled ? t.tile_height : 0, t.overlap,
                      traits.halo, num, den, traits.size_multiple,
                      /*feather=*/!traits.halo_exact);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(job.file, job.line, "tiling", e.what());
  }
}

int decode_slice_frames(const JobSpec& job) {
  return auto_decode_slice_frames(job.slice_frames, job.model.kind, job.devices != "cpu");
}

SliceRule job_slice_rule(const JobSpec& job, const ModelTraits& traits, int out_width,
                         int out_height) {
  if (traits.slice_frames > 0 || traits.slice_overlap > 0) {
    // The model's batches: `slice_frames` new frames each (the job's, else the model's), the
    // first also holding the frames later slices repeat (scheduler/slice_overlap.h).
    const int stride = job.slice_frames > 0 ? job.slice_frames : std::max(1, traits.slice_frames);
    return make_slice_rule(stride, 1, traits.slice_overlap);
  }
  const bool temporal = traits.causal_state || traits.frame_group > 1;
  const int64_t frame_bytes = int64_t(traits.out_channels) * out_width * out_height * 4;
  return make_slice_rule(auto_slice_frames(job.slice_frames, temporal, frame_bytes),
                         traits.frame_group, traits.frame_offset);
}

void add_size_metrics(TaskResult& result, int input_width, int input_height, int output_width,
                      int output_height) {
  result.metrics["input_width"] = input_width;
  result.metrics["input_height"] = input_height;
  result.metrics["output_width"] = output_width;
  result.metrics["output_height"] = output_height;
}

std::map<std::string, double> stage_metrics(const PipelineStats& stats) {
  return {
      {"stage_source_seconds", stats.source_seconds}, {"stage_tile_seconds", stats.tile_seconds},
      {"stage_model_seconds", stats.model_seconds},   {"stage_blend_seconds", stats.blend_seconds},
      {"stage_sink_seconds", stats.sink_seconds},     {"pipeline_seconds", stats.wall_seconds},
      {"pipeline_drain_seconds", stats.drain_seconds}};
}

PendingOutput finish_video(std::unique_ptr<io::VideoWriter> writer, TaskResult partial,
                           bool background, std::function<void(int64_t)> check) {
  auto finish = [writer = std::move(writer), partial = std::move(partial),
                 check = std::move(check)]() mutable {
    const Clock::time_point start = Clock::now();
    partial.frames = writer->finish();
    partial.dropped = writer->dropped();
    const io::VideoWriter::Seconds seconds = writer->seconds();
    partial.metrics["writer_convert_seconds"] = seconds.convert;
    partial.metrics["writer_encode_seconds"] = seconds.encode;
    partial.metrics["writer_flush_seconds"] = seconds.flush;
    partial.metrics["writer_commit_seconds"] = seconds.commit;
    partial.finish_seconds = seconds_since(start);
    partial.metrics["writer_finish_seconds"] = partial.finish_seconds;
    if (const auto pipeline = partial.metrics.find("pipeline_seconds");
        pipeline != partial.metrics.end()) {
      partial.bound = bound_after_finish(partial.bound, pipeline->second, partial.finish_seconds);
    }
    if (check) check(partial.frames);
    return partial;
  };
  if (!background) return PendingOutput(finish());
  return PendingOutput(std::async(std::launch::async, std::move(finish)));
}

namespace {

// The first CUDA device of a job's resolved devices, or null.
const Device* first_gpu(const std::vector<Device>& devices) {
  const auto gpu = std::find_if(devices.begin(), devices.end(),
                                [](const Device& d) { return d.kind == Device::Kind::kCuda; });
  return gpu != devices.end() ? &*gpu : nullptr;
}

}  // namespace

parallel::ThreadBudget input_thread_budget(const RunOptions& run) {
  return parallel::thread_budget(parallel::host_cores(), run.lanes);
}

io::ReaderOptions reader_options(const JobSpec& job, const std::vector<Device>& devices,
                                 const RunOptions& run) {
  io::ReaderOptions options;
  const parallel::ThreadBudget threads = input_thread_budget(run);
  options.threads = threads.decoder_option();
  options.convert_threads = threads.convert_threads;
  options.max_error_rate = job.max_error_rate;
  const Device* gpu = first_gpu(devices);
  options.nvdec = job.decode == DecodeMode::kNvdec || (job.decode == DecodeMode::kAuto && gpu);
  options.cuda_device = gpu ? gpu->index : 0;
  options.deinterlace = job.deinterlace == DeinterlaceMode::kOff     ? io::Deinterlace::kOff
                        : job.deinterlace == DeinterlaceMode::kBwdif ? io::Deinterlace::kBwdif
                                                                     : io::Deinterlace::kAuto;
  return options;
}

io::EncodeSettings encode_settings(const EncodeSpec& spec, const std::vector<Device>& devices,
                                   const RunOptions& run) {
  io::EncodeSettings s;
  // A GPU model's thread launches work and copies: held up behind x264's frame threads (1.5 per
  // core), it left the GPU idle. On an H200 host (16 cores) a 1080p decode_latents job's model
  // stage took 4.04 s against 3.86 s decoding alone.
  if (first_gpu(devices)) s.nice = 5;
  s.codec = spec.codec;
  s.crf = spec.crf;
  s.preset = spec.preset;
  s.pix_fmt = spec.pix_fmt;
  const parallel::ThreadBudget threads = input_thread_budget(run);
  s.threads = spec.threads > 0 ? spec.threads : threads.encoder_option();
  s.convert_threads = threads.convert_threads;
  s.options = spec.options;
  s.copy_audio = spec.copy_audio;
  s.copy_subtitles = spec.copy_subtitles;
  s.container = spec.container;
  return s;
}

namespace {

bool is_tensor_file(const std::string& path) {
  const std::string tail = ".safetensors";
  return path.size() >= tail.size() &&
         path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
}

// Video in, video out, same frame count and timing: the built-in upscalers and any other
// frame-to-frame model.
class UpscaleRunner : public FinishingRunner {
 public:
  explicit UpscaleRunner(const JobSpec& job)
      : job_(job), models_(job.model, job.devices, job.device_ids, job.parallel) {}
  const ModelSet* model_set() const override { return &models_; }

 private:
  PendingOutput run(const std::string& input, const std::string& output, const RunOptions& options,
                    Progress& progress, bool background) override {
    if (is_tensor_file(input)) {
      if (dynamic_cast<const TensorModel*>(&models_.model())) {
        return PendingOutput(run_tensor_model(job_, models_, input, output, progress));
      }
      return PendingOutput(upscale_tensor(job_, models_, input, output, options, progress));
    }
    if (is_tensor_file(output)) {
      throw ConfigError(
          job_.file, job_.line, "output",
          "a .safetensors output needs a .safetensors input (" + input + " is upscaled to video)");
    }
    if (io::image_path_kind(output) != io::ImagePath::kNone) {
      return upscale_to_images(job_, models_, input, output, options, progress, background);
    }
    const ModelTraits& traits = models_.traits();
    io::ReaderOptions read = reader_options(job_, models_.devices(), options);
    // A model that may keep its frames on the device: decoder threads from the host's budget
    // (the encoders get the rest).
    bool gpus = true;
    for (const Device& d : models_.session_devices()) gpus = gpus && d.kind == Device::Kind::kCuda;
    const bool device_frames =
        traits.device_frames && (job_.frame_path == FramePathMode::kDevice ||
                                 (job_.frame_path == FramePathMode::kAuto && gpus));
    if (device_frames) {
      read.threads = host_budget(job_, input_thread_budget(options), 0, 0).decode_threads;
    }
    io::VideoReader reader(input, read);
    const io::VideoInfo& info = reader.info();

    PipelineOptions pipeline;
    pipeline.tokens = job_.tokens;
    pipeline.cancel = options.cancel;
    pipeline.tiles = plan_job_tiles(job_, traits, info.width, info.height);

    io::WriterConfig config;
    config.path = output;
    config.width = pipeline.tiles.out_width();
    config.height = pipeline.tiles.out_height();
    // An odd size stays odd unless the encoder needs it even (the writer crops and says so).
    config.time_base = info.time_base;
    config.frame_rate = info.frame_rate;
    config.source_path = input;
    config.source = info;
    config.encode = encode_settings(job_.encode, models_.devices(), options);
    if (options.segment) {
      config.encode.copy_audio = false;
      config.encode.copy_subtitles = false;
      config.encode.copy_other = false;
      config.exact_timescale = true;
    }
    auto writer = std::make_unique<io::VideoWriter>(config);

    const SliceRule rule = job_slice_rule(job_, traits, config.width, config.height);
    if (const auto kernel = yuv_native_kernel(job_, models_.devices(), info, *writer)) {
      return run_yuv(input, output, reader, std::move(writer), *kernel, rule, options, progress,
                     background, {config.width, config.height});
    }
    if (traits.device_frames) {
      std::string why;
      if (device_path_applies(job_, models_, info, *writer, why)) {
        return run_device(input, output, reader, std::move(writer), config, rule, options, progress,
                          background);
      }
      log::get("upscale")->info("{}: host frame path (RGB float frames on the host): {}", input,
                                why);
    }
    VideoSliceSource source(reader, rule, {}, options.first_frame, options.end_frame);
    VideoFileSink sink(*writer, config.width, config.height, /*same_timing=*/true, {}, &progress);
    // Batches that repeat the frames before them, cross-faded at their seams.
    OverlapSource overlapped(source, traits.slice_overlap);
    OverlapSink blended(sink, traits.slice_overlap);
    const bool overlap = traits.slice_overlap > 0;
    if (options.write_to_frame >= 0) blended.set_end(options.write_to_frame);
    // The source's alpha goes around the model (which takes RGB) and is resized to the output.
    AlphaStore alpha;
    if (info.alpha) {
      source.set_alpha_store(&alpha);
      sink.set_alpha_store(&alpha);
    }
    // A farm chunk with context writes only its own frames.
    const int64_t write_from = std::max(options.first_frame, options.write_from_frame);
    sink.set_write_from(write_from);
    if (options.on_slice) sink.set_on_slice(options.on_slice);
    auto sessions = models_.open_sessions();
    pipeline.devices = models_.session_devices();
    const DeviceMeter meter(models_);

    int64_t frames_total = info.frames_estimate - write_from;
    if (options.end_frame >= 0) frames_total = options.end_frame - write_from;
    if (options.write_to_frame >= 0) frames_total = options.write_to_frame - write_from;
    progress.begin(input, std::max<int64_t>(frames_total, 0));
    PipelineStats stats;
    pipeline.stats = &stats;
    run_pipeline(overlap ? static_cast<SliceSource&>(overlapped) : source, sessions,
                 overlap ? static_cast<SliceSink&>(blended) : sink, pipeline);
    std::map<std::string, double> device_metrics = meter.metrics(sessions);
    sessions.clear();
    progress.end();
    TaskResult partial{0, stage_metrics(stats), reader.decoder_name()};
    add_size_metrics(partial, info.width, info.height, config.width, config.height);
    partial.metrics.insert(device_metrics.begin(), device_metrics.end());
    partial.metrics["sink_extract_seconds"] = sink.extract_seconds();
    const int64_t expected =
        (overlap ? blended.frames_passed() : source.frames_read()) - sink.frames_dropped();
    return finish_video(std::move(writer), std::move(partial), background,
                        [output, expected](int64_t written) {
                          if (written != expected) {
                            throw Error(output + ": wrote " + std::to_string(written) +
                                            " frames but read " + std::to_string(expected),
                                        kExitSoftware);
                          }
                        });
  }

  // The device frame path (scheduler/upscale_device.h).
  PendingOutput run_device(const std::string& input, const std::string& output,
                           io::VideoReader& reader, std::unique_ptr<io::VideoWriter> writer,
                           const io::WriterConfig& config, const SliceRule& rule,
                           const RunOptions& options, Progress& progress, bool background) {
    if (options.first_frame > 0) reader.seek_to_frame(options.first_frame);
    const HostBudget budget =
        host_budget(job_, input_thread_budget(options), config.width, config.height);
    // A farm chunk is itself a segment: one encoder.
    const int instances = options.segment ? 1 : budget.instances;
    io::VideoWriter::YuvTarget target;
    writer->yuv_target(target);
    parallel::FramePathConfig frames;
    frames.output.width = target.width;
    frames.output.height = target.height;
    frames.output.depth = target.depth;
    frames.output.shift_x = target.chroma_shift_x;
    frames.output.shift_y = target.chroma_shift_y;
    frames.output.matrix = io::yuv_matrix(target.colorspace, target.height);
    frames.output.full_range = target.full_range;
    frames.model_width = config.width;
    frames.model_height = config.height;
    std::vector<DeviceLane> lanes;
    const std::vector<Device> devices = models_.session_devices();
    const std::vector<parallel::DeviceWorker*> workers = models_.workers();
    for (size_t i = 0; i < workers.size(); ++i) {
      lanes.push_back({&models_.rank_model(i), devices[i], workers[i]});
    }
    DeviceRunOptions run;
    run.tokens = job_.tokens;
    run.slice_frames = rule.slice_frames;
    run.output_pix_fmt = target.format;
    run.cancel = options.cancel;
    run.end_frame = options.end_frame;
    run.write_from = std::max(options.first_frame, options.write_from_frame);
    run.on_slice = options.on_slice;
    run.progress = &progress;

    int64_t frames_total = reader.info().frames_estimate - run.write_from;
    if (options.end_frame >= 0) frames_total = options.end_frame - run.write_from;
    WriterPlaneSink single(*writer);
    PlaneSink* sink = &single;
    std::unique_ptr<SegmentEncoder> segments;
    std::vector<std::string> dropped;
    if (instances > 1) {
      io::WriterConfig each = config;
      each.encode.threads = budget.encoder_threads;
      dropped = writer->dropped();
      writer.reset();  // its temp file goes: the segments' join writes the output
      SegmentOptions split;
      split.instances = instances;
      split.segment_frames = segment_frames_for(reader.info().frame_rate,
                                                std::max<int64_t>(frames_total, 0), instances);
      split.cancel = options.cancel;
      segments = std::make_unique<SegmentEncoder>(each, split);
      sink = segments.get();
    }
    const int threads =
        instances > 1 ? budget.encoder_threads : config.encode.threads;  // what the writer got
    log::get("upscale")->info(
        "{}: device frame path on {} ({} lane{}), {} encoder{} ({} threads{}), {} decoder threads",
        input, devices.front().str(), lanes.size(), lanes.size() > 1 ? "s" : "", instances,
        instances > 1 ? " instances on segments" : "",
        threads > 0 ? std::to_string(threads) : "auto", instances > 1 ? " each" : "",
        budget.decode_threads);
    const DeviceMeter meter(models_);
    progress.begin(input, std::max<int64_t>(frames_total, 0));
    const DeviceRunResult done = run_device_upscale(reader, *sink, lanes, frames, run);
    progress.end();
    TaskResult partial{0, done.metrics(), reader.decoder_name()};
    const std::map<std::string, double> device_metrics = meter.metrics({});
    partial.metrics.insert(device_metrics.begin(), device_metrics.end());
    partial.bound = done.bound();
    partial.dropped = dropped;
    log::get("upscale")->info("{}: {} -> {}; {}", input, done.input_format, done.output_format,
                              partial.bound);
    const int64_t expected = done.frames_written;
    auto check = [output, expected](int64_t written) {
      if (written != expected) {
        throw Error(output + ": wrote " + std::to_string(written) + " frames but upscaled " +
                        std::to_string(expected),
                    kExitSoftware);
      }
    };
    if (!segments) return finish_video(std::move(writer), std::move(partial), background, check);
    return finish_segments(std::move(segments), std::move(partial), background, check);
  }

  // The built-in resamplers' YUV-native path (scheduler/upscale_yuv.h).
  PendingOutput run_yuv(const std::string& input, const std::string& output,
                        io::VideoReader& reader, std::unique_ptr<io::VideoWriter> writer,
                        const models::ResampleKernel& kernel, const SliceRule& rule,
                        const RunOptions& options, Progress& progress, bool background,
                        std::pair<int, int> out_size) {
    if (options.first_frame > 0) reader.seek_to_frame(options.first_frame);
    YuvRunOptions run;
    run.tokens = std::max(job_.tokens, 4);
    run.cancel = options.cancel;
    run.end_frame = options.end_frame;
    run.write_from = std::max(options.first_frame, options.write_from_frame);
    run.slice_frames = rule.slice_frames;
    run.on_slice = options.on_slice;
    run.progress = &progress;
    int64_t frames_total = reader.info().frames_estimate - run.write_from;
    if (options.end_frame >= 0) frames_total = options.end_frame - run.write_from;
    progress.begin(input, std::max<int64_t>(frames_total, 0));
    const YuvRunResult done = run_yuv_upscale(reader, *writer, kernel, run);
    progress.end();
    TaskResult partial{0, stage_metrics(done.stats), reader.decoder_name()};
    partial.metrics["yuv_native"] = 1;
    add_size_metrics(partial, reader.info().width, reader.info().height, out_size.first,
                     out_size.second);
    const int64_t expected = done.frames_written;
    return finish_video(std::move(writer), std::move(partial), background,
                        [output, expected](int64_t written) {
                          if (written != expected) {
                            throw Error(output + ": wrote " + std::to_string(written) +
                                            " frames but resampled " + std::to_string(expected),
                                        kExitSoftware);
                          }
                        });
  }

  JobSpec job_;
  ModelSet models_;
};

}  // namespace

std::unique_ptr<TaskRunner> make_task_runner(const JobSpec& job) {
  if (job.task == Task::kUpscale) return std::make_unique<UpscaleRunner>(job);
  if (job.task == Task::kDit) return make_tensor_task_runner(job);
  return make_latent_task_runner(job);
}

}  // namespace wm::sched
