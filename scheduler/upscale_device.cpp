#include "scheduler/upscale_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "io/yuv_image.h"
#include "scheduler/tasks.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/thread_name.h"

namespace wm::sched {
namespace {

// A slice on its way from the reader to the encoder: its frames' timing and its launch.
struct Pending {
  int64_t index = 0;
  std::vector<io::VideoFrame> timing;  // no images
  std::future<std::unique_ptr<parallel::LaunchedSlice>> launched;
};

// The slices between the reader and this thread, in order; push() blocks while `capacity` are
// queued, until stop().
class SliceQueue {
 public:
  explicit SliceQueue(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}
  bool push(Pending&& p) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return stopped_ || items_.size() < capacity_; });
    if (stopped_) return false;
    items_.push_back(std::move(p));
    changed_.notify_all();
    return true;
  }
  bool pop(Pending& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return closed_ || stopped_ || !items_.empty(); });
    if (stopped_ || items_.empty()) return false;
    out = std::move(items_.front());
    items_.pop_front();
    changed_.notify_all();
    return true;
  }
  void close() {  // the producer is done
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    changed_.notify_all();
  }
  void stop() {  // the consumer gives up
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    changed_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> items_;
  bool closed_ = false, stopped_ = false;
};

YuvPlanes planes_of(const io::YuvImage& image) {
  YuvPlanes p;
  for (int i = 0; i < 3; ++i) {
    p.data[i] = image.data[i];
    p.stride[i] = image.stride[i];
  }
  return p;
}

// Frame `i` of an output block as a picture the encoder takes without a copy (the block stays
// alive while the encoder holds it).
io::YuvImage picture(const std::shared_ptr<parallel::HostBlock>& block, int i, int format,
                     const YuvFormat& f) {
  io::YuvImage image;
  image.width = f.width;
  image.height = f.height;
  image.format = format;
  image.depth = f.depth;
  image.chroma_shift_x = f.shift_x;
  image.chroma_shift_y = f.shift_y;
  uint8_t* base = block->frame(i);
  for (int p = 0; p < 3; ++p) {
    image.data[p] = base + block->layout.offset[p];
    image.stride[p] = std::ptrdiff_t(block->layout.stride[p]);
  }
  image.owner = block;
  return image;
}

bool same_shape(const io::YuvImage& a, const io::YuvImage& b) {
  return a.format == b.format && a.width == b.width && a.height == b.height &&
         a.colorspace == b.colorspace && a.color_range == b.color_range &&
         a.chroma_location == b.chroma_location;
}

}  // namespace

bool device_path_applies(const JobSpec& job, const ModelSet& models, const io::VideoInfo& source,
                         const io::VideoWriter& writer, std::string& why) {
  if (job.frame_path == FramePathMode::kHost) {
    why = "frame_path: host";
    return false;
  }
  const ModelTraits& traits = models.traits();
  if (!traits.device_frames) {
    why = traits.name + " takes its frames from the host";
    return false;
  }
  if (models.sequence_parallel()) {
    why = "its slices are split over ranks";
    return false;
  }
  if (job.frame_path == FramePathMode::kAuto) {
    for (const Device& d : models.session_devices()) {
      if (d.kind != Device::Kind::kCuda) {
        why = "the model runs on the CPU";
        return false;
      }
    }
  }
  if (job.tiling.enabled && !job.tiling.automatic) {
    why = "tiles (tiling:)";
    return false;
  }
  if (source.alpha) {
    why = "the source has alpha";
    return false;
  }
  if (!io::yuv_device_format(io::pixel_format_id(source.pix_fmt))) {
    why = "the source's pixel format " + source.pix_fmt + " is not planar YUV";
    return false;
  }
  io::VideoWriter::YuvTarget target;
  if (!writer.yuv_target(target)) {
    why =
        "the encoder does not take planar YUV as it is (its pixel format, or a rotation turned "
        "into the pixels)";
    return false;
  }
  if (traits.scale_den != 1 || traits.in_channels != 3 || traits.out_channels != 3 ||
      traits.causal_state || traits.frame_group != 1) {
    why = traits.name + " is not a frame-to-frame upscaler";
    return false;
  }
  return true;
}

HostBudget host_budget(const JobSpec& job, const parallel::ThreadBudget& threads, int out_width,
                       int out_height) {
  HostBudget b;
  b.cores = threads.lane_cores;
  b.decode_threads = threads.device_decode_threads;
  const int left = std::max(1, b.cores - b.decode_threads);
  if (job.encode.instances > 0) {
    b.instances = job.encode.instances;
  } else if (job.parallel.lane_ranks > 0) {
    b.instances = 1;  // a batch on input lanes: the lanes' encoders already run side by side
  } else {
    const bool small = int64_t(out_width) * out_height < int64_t(1280) * 720;
    b.instances = small ? 1 : std::clamp(b.cores / 8, 1, 4);
  }
  b.encoder_threads = job.encode.threads > 0
                          ? job.encode.threads
                          : std::max(1, int(std::lround(1.5 * left / b.instances)));
  return b;
}

int segment_frames_for(const io::Rational& frame_rate, int64_t frames, int instances) {
  const double fps =
      frame_rate.num > 0 && frame_rate.den > 0 ? double(frame_rate.num) / frame_rate.den : 25.0;
  const int64_t most = std::max(24, int(std::lround(2.0 * fps)));
  if (frames <= 0 || instances <= 1) return int(most);
  // Whole rounds of one segment per instance, the segments as even as the frames allow.
  const int64_t rounds = (frames + instances * most - 1) / (instances * most);
  return int((frames + instances * rounds - 1) / (instances * rounds));
}

std::map<std::string, double> DeviceRunResult::shares() const {
  const double w = std::max(wall, 1e-9);
  const double gpu = w * std::max(lanes, 1);
  return {{"decode", (decode + stage) / w}, {"launch", launch / gpu},
          {"upload", upload / gpu},         {"convert", convert / gpu},
          {"model", model / gpu},           {"convert_back", convert_back / gpu},
          {"download", download / gpu},     {"encode", encode / (w * std::max(instances, 1))}};
}

double DeviceRunResult::gpu_busy_share() const {
  return (convert + model + convert_back) / (std::max(wall, 1e-9) * std::max(lanes, 1));
}

std::string DeviceRunResult::bound() const {
  const std::map<std::string, double> s = shares();
  std::vector<std::pair<const char*, double>> stages = {
      {"decode", s.at("decode")},
      {gpu ? "the GPU (model and conversions)" : "the device (model and conversions)",
       gpu_busy_share()},
      {"upload", s.at("upload")},
      {"download", s.at("download")},
      {"encode", s.at("encode")}};
  // On a GPU the launches are host work of their own; on the CPU they are the device's work.
  if (gpu) stages.push_back({"launching on the device (host side)", s.at("launch")});
  const auto top = std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) {
    return a.second < b.second;
  });
  char line[200];
  std::snprintf(line, sizeof(line), "bound by %s (busy %.0f%% of the time); %s busy %.0f%%",
                top->first, 100.0 * top->second, gpu ? "GPU" : "device", 100.0 * gpu_busy_share());
  return line;
}

std::map<std::string, double> DeviceRunResult::metrics() const {
  std::map<std::string, double> m = {{"frame_path_device", 1},
                                     {"pipeline_seconds", wall},
                                     {"stage_decode_seconds", decode},
                                     {"stage_pack_seconds", stage},
                                     {"stage_launch_seconds", launch},
                                     {"stage_upload_seconds", upload},
                                     {"stage_convert_seconds", convert},
                                     {"stage_model_seconds", model},
                                     {"stage_convert_back_seconds", convert_back},
                                     {"stage_download_seconds", download},
                                     {"stage_encode_seconds", encode},
                                     {"stage_wait_device_seconds", wait_device},
                                     {"gpu_busy_share", gpu_busy_share()},
                                     {"device_lanes", double(lanes)},
                                     {"encoder_instances", double(instances)}};
  for (const auto& [name, share] : shares()) m["share_" + name] = share;
  return m;
}

DeviceRunResult run_device_upscale(io::VideoReader& reader, PlaneSink& sink,
                                   const std::vector<DeviceLane>& lanes,
                                   const parallel::FramePathConfig& output,
                                   const DeviceRunOptions& options) {
  if (lanes.empty()) throw Error("device frame path: no device lane", kExitSoftware);
  DeviceRunResult result;
  result.lanes = int(lanes.size());
  result.gpu = lanes.front().device.kind == Device::Kind::kCuda;
  result.instances = sink.instances();
  const Clock::time_point start = Clock::now();
  std::vector<double> busy_before;
  for (const DeviceLane& lane : lanes) busy_before.push_back(lane.worker->stats().busy_seconds);

  // The first frame says what the device converts from.
  io::VideoFrame first_timing;
  io::YuvImage first;
  Clock::time_point t = Clock::now();
  const bool any = reader.read_yuv(first_timing, first);
  result.decode += seconds_since(t);
  if (!any) {
    result.wall = seconds_since(start);
    return result;
  }
  parallel::FramePathConfig config = output;
  config.input = io::yuv_format_of(first);
  config.slice_frames = std::max(1, options.slice_frames);
  config.tokens = std::max(1, options.tokens);
  config.dither = options.dither;
  // Chroma stays where the source has it (the host path's assumption, centred, when unsaid).
  config.output.chroma_x = config.input.chroma_x;
  config.output.chroma_y = config.input.chroma_y;
  result.input_format = config.input.describe();
  result.output_format = config.output.describe();
  std::vector<std::unique_ptr<parallel::FramePath>> paths;
  for (const DeviceLane& lane : lanes) {
    paths.push_back(lane.worker->call(
        [&] { return parallel::make_frame_path(*lane.model, lane.device, config); }));
  }

  SliceQueue queue(size_t(std::max(options.tokens, 2 * int(lanes.size()))));
  std::exception_ptr reader_failure;
  std::atomic<bool> stop{false};
  std::thread reader_thread([&] {
    name_this_thread(kReadThreads);  // decoding too, with one decoder thread
    try {
      bool have_first = true, end = false;
      for (int64_t slice = 0; !end && !stop.load(); ++slice) {
        if (options.cancel && options.cancel->load()) throw Cancelled("interrupted");
        const size_t lane = size_t(slice % int64_t(lanes.size()));
        std::shared_ptr<parallel::HostBlock> block = paths[lane]->input_block();
        Pending pending;
        pending.index = slice;
        while (block->frames < block->capacity) {
          io::VideoFrame timing;
          io::YuvImage image;
          if (have_first) {
            timing = std::move(first_timing);
            image = first;
            have_first = false;
          } else {
            const Clock::time_point t0 = Clock::now();
            const bool got = reader.read_yuv(timing, image);
            result.decode += seconds_since(t0);
            if (!got) {
              end = true;
              break;
            }
          }
          if (options.end_frame >= 0 && timing.index >= options.end_frame) {
            end = true;
            break;
          }
          if (!same_shape(image, first)) {
            throw InputError("frame " + std::to_string(timing.index) +
                             " changes the pixel format, size or colour tags of the video");
          }
          ++result.frames_read;
          if (timing.index < options.write_from) {  // a farm chunk's context: not needed
            ++result.frames_dropped;
            continue;
          }
          const Clock::time_point t0 = Clock::now();
          pack_planes(config.input, planes_of(image), block->layout, block->frame(block->frames));
          result.stage += seconds_since(t0);
          ++block->frames;
          io::VideoFrame meta;
          meta.index = timing.index;
          meta.pts = timing.pts;
          meta.duration = timing.duration;
          pending.timing.push_back(std::move(meta));
        }
        if (block->frames == 0) break;
        parallel::FramePath* path = paths[lane].get();
        exec::DeviceContext* context = lanes[lane].worker->context();
        pending.launched = lanes[lane].worker->submit(
            [path, context, block]() mutable { return path->launch(std::move(block), *context); });
        block.reset();
        if (!queue.push(std::move(pending))) break;
      }
    } catch (...) {
      reader_failure = std::current_exception();
      queue.stop();  // the slices still queued are not encoded
    }
    queue.close();
  });

  std::exception_ptr writer_failure;
  try {
    Pending pending;
    while (queue.pop(pending)) {
      Clock::time_point t0 = Clock::now();
      std::unique_ptr<parallel::LaunchedSlice> slice = pending.launched.get();
      slice->wait();
      result.wait_device += seconds_since(t0);
      const parallel::SliceTimes times = slice->times();
      result.upload += times.upload;
      result.convert += times.convert;
      result.model += times.model;
      result.convert_back += times.convert_back;
      result.download += times.download;
      for (size_t i = 0; i < pending.timing.size(); ++i) {
        sink.write(pending.timing[i],
                   picture(slice->output, int(i), options.output_pix_fmt, config.output));
      }
      const int64_t n = int64_t(pending.timing.size());
      result.frames_written += n;
      ++result.slices;
      // Progress and on_slice move by slices, as the other paths' sinks do.
      if (options.progress) options.progress->add(n);
      if (options.on_slice) options.on_slice(pending.index, result.frames_written);
    }
  } catch (...) {
    writer_failure = std::current_exception();
  }
  stop = true;
  queue.stop();
  reader_thread.join();
  // Slices still queued on the workers finish before the paths go.
  for (size_t i = 0; i < lanes.size(); ++i) {
    lanes[i].worker->call([] {});
    result.launch += lanes[i].worker->stats().busy_seconds - busy_before[i];
  }
  if (writer_failure) std::rethrow_exception(writer_failure);
  if (reader_failure) std::rethrow_exception(reader_failure);
  result.encode = sink.busy_seconds();
  result.wall = seconds_since(start);
  return result;
}

std::string bound_after_finish(const std::string& bound, double pipeline_seconds,
                               double finish_seconds) {
  if (bound.empty() || finish_seconds <= 0.25 * (pipeline_seconds + finish_seconds)) return bound;
  char line[120];
  std::snprintf(line, sizeof(line),
                "bound by encode (the encoders finished %.2f s after a %.2f s pipeline); before: ",
                finish_seconds, pipeline_seconds);
  return line + bound;
}

PendingOutput finish_segments(std::unique_ptr<SegmentEncoder> encoder, TaskResult partial,
                              bool background, std::function<void(int64_t)> check) {
  auto finish = [encoder = std::move(encoder), partial = std::move(partial),
                 check = std::move(check)]() mutable {
    const Clock::time_point start = Clock::now();
    partial.frames = encoder->finish();
    partial.metrics["writer_flush_seconds"] = encoder->flush_seconds();
    partial.metrics["writer_join_seconds"] = encoder->join_seconds();
    partial.metrics["encoder_segments"] = double(encoder->segments());
    partial.finish_seconds = seconds_since(start);
    partial.metrics["writer_finish_seconds"] = partial.finish_seconds;
    partial.bound = bound_after_finish(partial.bound, partial.metrics["pipeline_seconds"],
                                       partial.finish_seconds);
    encoder.reset();  // the segments' folder goes
    if (check) check(partial.frames);
    return partial;
  };
  if (!background) return PendingOutput(finish());
  return PendingOutput(std::async(std::launch::async, std::move(finish)));
}

}  // namespace wm::sched
