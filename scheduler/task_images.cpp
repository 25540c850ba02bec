// The upscale task into image outputs: one image ("out/{stem}.png", from a one-image input) or a
// numbered sequence ("out/{stem}/%06d.png", from any input: an image sequence, a video). Inputs
// are read by io::VideoReader (libav's image2 / *_pipe demuxers and their decoders); each output
// image is encoded by an io::VideoWriter of its own (image2pipe: temp file, verify, rename).
// One image is decoded at a time per slice in flight and nothing per input outlives it, so a
// folder of many images runs in flat memory. Alpha goes around the model and is resized with
// the built-in Lanczos resampler (models::resize_plane_lanczos).
#include <algorithm>
#include <memory>
#include <optional>

#include "io/image_output.h"
#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/preflight.h"
#include "scheduler/slice_overlap.h"
#include "scheduler/tasks.h"
#include "scheduler/video_stages.h"
#include "src/base/error.h"
#include "src/base/log.h"
#include "src/models/resample/resize_plane.h"

namespace wm::sched {
namespace {

// The writer settings every image of an output shares.
io::WriterConfig image_config(const JobSpec& job, const ModelSet& models, const io::VideoInfo& info,
                              const std::string& output, int width, int height,
                              const RunOptions& run) {
  io::WriterConfig config;
  config.path = output;
  config.width = width;
  config.height = height;
  config.time_base = info.time_base;
  config.frame_rate = info.frame_rate;
  config.source = info;
  config.encode = encode_settings(job.encode, models.devices(), run);
  // The extension picks the encoder (png, mjpeg, tiff, ...) unless encode.codec says otherwise.
  if (!job.encode.codec_line) config.encode.codec = io::image_encoder_for(output);
  // An image holds no audio, subtitles or attachments.
  config.encode.copy_audio = false;
  config.encode.copy_subtitles = false;
  config.encode.copy_other = false;
  config.encode.convert_workers = 1;
  // JPEG files are full range (JFIF): libavcodec's mjpeg refuses limited-range YUV.
  if (config.encode.codec == "mjpeg") config.source.color_range = 2;  // AVCOL_RANGE_JPEG
  return config;
}

// Writes each output frame as an image: the one image of a single-image output (a second frame
// is an error, before anything is renamed into place), or the next file of a sequence folder,
// numbered from `first_number` in frame order.
class ImageSink : public SliceSink {
 public:
  ImageSink(io::VideoWriter* single, io::SequenceFolder* folder, io::WriterConfig config,
            int64_t first_number, const std::string& input, AlphaStore* alpha, Progress* progress)
      : single_(single),
        folder_(folder),
        config_(std::move(config)),
        next_number_(first_number),
        input_(input),
        alpha_(alpha),
        progress_(progress) {}

  void write(SliceResult&& result) override {
    const Planar& out = result.output;
    if (out.frames != int(result.frames.size()) + result.padded) {
      throw Error("model returned " + std::to_string(out.frames) + " frames for a slice of " +
                      std::to_string(result.frames.size() + result.padded),
                  kExitSoftware);
    }
    for (size_t t = 0; t < result.frames.size(); ++t) {
      io::VideoFrame frame;
      frame.index = result.frames[t].index;
      frame.pts = result.frames[t].pts;
      frame.duration = result.frames[t].duration;
      frame.image = extract_frame(out, int(t), config_.height, config_.width);
      if (alpha_) {
        const Planar alpha = alpha_->take(frame.index);
        if (!alpha.empty()) {
          frame.alpha = models::resize_plane_lanczos(alpha, config_.width, config_.height);
        }
      }
      if (single_) {
        if (written_ > 0) {
          throw InputError(input_ + ": holds more than one frame; a single-image output (" +
                               config_.path +
                               ") takes one image: write a sequence (e.g. out/{stem}/%06d.png) "
                               "or a video",
                           kExitDataErr);
        }
        single_->write(frame);
      } else {
        io::WriterConfig config = config_;
        config.path = folder_->frame_path(next_number_++);
        io::VideoWriter writer(config);
        writer.write(frame);
        writer.finish();
        if (dropped_.empty()) dropped_ = writer.dropped();
      }
      ++written_;
    }
    if (progress_) progress_->add(int64_t(result.frames.size()));
  }

  int64_t written() const { return written_; }
  const std::vector<std::string>& dropped() const { return dropped_; }

 private:
  io::VideoWriter* single_;
  io::SequenceFolder* folder_;
  io::WriterConfig config_;
  int64_t next_number_;
  std::string input_;
  AlphaStore* alpha_;
  Progress* progress_;
  int64_t written_ = 0;
  std::vector<std::string> dropped_;
};

}  // namespace

PendingOutput upscale_to_images(const JobSpec& job, const ModelSet& models,
                                const std::string& input, const std::string& output,
                                const RunOptions& options, Progress& progress, bool background) {
  const io::ImagePath kind = io::image_path_kind(output);
  check_output_kind(job, input, output);  // also at validation; watch folders do not validate
  io::ReaderOptions read = reader_options(job, models.devices(), options);
  // NVDEC decodes video codecs: an image would only try it and warn, once per image.
  if (io::input_image_kind(input) != io::ImagePath::kNone) read.nvdec = false;
  io::VideoReader reader(input, read);
  const io::VideoInfo& info = reader.info();
  const ModelTraits& traits = models.traits();

  PipelineOptions pipeline;
  pipeline.tokens = job.tokens;
  pipeline.cancel = options.cancel;
  pipeline.tiles = plan_job_tiles(job, traits, info.width, info.height);
  const int width = pipeline.tiles.out_width(), height = pipeline.tiles.out_height();
  const io::WriterConfig config = image_config(job, models, info, output, width, height, options);

  // A single image: its writer opens now (a bad encoder setting fails before any work).
  std::unique_ptr<io::VideoWriter> single;
  std::optional<io::SequenceFolder> folder;
  int64_t first_number = 1;
  if (kind == io::ImagePath::kImage) {
    single = std::make_unique<io::VideoWriter>(config);
  } else {
    // Also checked at validation; here too for callers that do not validate (watch folders).
    if (io::path_within(input, io::output_target(output))) {
      throw ConfigError(job.file, job.output_line, "output",
                        output +
                            ": an image sequence's folder is written whole and may not "
                            "hold the input " +
                            input);
    }
    folder.emplace(output);
    // An input sequence keeps its numbering; a video's frames are numbered from 1 (as ffmpeg).
    if (io::input_image_kind(input) == io::ImagePath::kSequence) {
      first_number = io::sequence_start_number(input);
    }
  }

  const SliceRule rule = job_slice_rule(job, traits, width, height);
  VideoSliceSource source(reader, rule);
  AlphaStore alpha;
  if (info.alpha) source.set_alpha_store(&alpha);
  ImageSink sink(single.get(), folder ? &*folder : nullptr, config, first_number, input,
                 info.alpha ? &alpha : nullptr, &progress);
  // Batches that repeat the frames before them, cross-faded at their seams.
  OverlapSource overlapped(source, traits.slice_overlap);
  OverlapSink blended(sink, traits.slice_overlap);
  const bool overlap = traits.slice_overlap > 0;
  auto sessions = models.open_sessions();
  pipeline.devices = models.session_devices();
  const DeviceMeter meter(models);
  progress.begin(input, std::max<int64_t>(info.frames_estimate, 0));
  PipelineStats stats;
  pipeline.stats = &stats;
  run_pipeline(overlap ? static_cast<SliceSource&>(overlapped) : source, sessions,
               overlap ? static_cast<SliceSink&>(blended) : sink, pipeline);
  std::map<std::string, double> device_metrics = meter.metrics(sessions);
  sessions.clear();
  progress.end();
  TaskResult partial{0, stage_metrics(stats), reader.decoder_name()};
  add_size_metrics(partial, info.width, info.height, width, height);
  partial.metrics.insert(device_metrics.begin(), device_metrics.end());
  const int64_t expected = source.frames_read();
  if (expected == 0) throw InputError(input + ": no frame to write", kExitDataErr);
  if (sink.written() != expected) {
    throw Error(output + ": wrote " + std::to_string(sink.written()) + " images but read " +
                    std::to_string(expected) + " frames",
                kExitSoftware);
  }
  if (single) {
    return finish_video(std::move(single), std::move(partial), background);
  }
  folder->commit();
  partial.frames = sink.written();
  partial.dropped = sink.dropped();
  // What images cannot hold of a video source is said, not dropped silently.
  const int streams = info.audio_streams + info.subtitle_streams;
  if (streams > 0) {
    const std::string what =
        std::to_string(streams) + " audio/subtitle stream(s): an image sequence holds none";
    log::get("images")->warn("{}: {}", output, what);
    partial.dropped.push_back(what);
  }
  return PendingOutput(std::move(partial));
}

}  // namespace wm::sched
