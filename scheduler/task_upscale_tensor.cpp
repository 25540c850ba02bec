// The tensor path of the upscale task: a .safetensors input (`input_tensor:`, [N, 3, H, W] or
// [3, H, W], RGB in 0..1) through the same graph as video (slices of frames, tiles, blending)
// into a .safetensors output of the same rank holding the model's raw, unclamped values
// (tensor "output", float32). This is how the golden tests run whole jobs.
#include <cstring>
#include <string>

#include "scheduler/tasks.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/weights/safetensors.h"

namespace wm::sched {
namespace {

// Frames of an [N, C, H, W] (or [C, H, W]) tensor, cut into slices of `rule.slice_frames`.
class FrameTensorSource : public SliceSource {
 public:
  FrameTensorSource(const io::SafetensorsFile& file, const std::string& name, int channels,
                    const SliceRule& rule)
      : info_(file.info(name)), slice_frames_(std::max(1, rule.slice_frames)) {
    const auto& s = info_.shape;
    if (s.size() != 3 && s.size() != 4) {
      throw InputError(file.path() + ": tensor '" + name + "' must be [N,3,H,W] or [3,H,W]",
                       kExitDataErr);
    }
    const size_t o = s.size() == 4 ? 1 : 0;
    n_ = o ? s[0] : 1, c_ = s[o], h_ = s[o + 1], w_ = s[o + 2];
    if (c_ != channels) {
      throw InputError(file.path() + ": tensor '" + name + "' has " + std::to_string(c_) +
                           " channels, the model expects " + std::to_string(channels),
                       kExitDataErr);
    }
    if (n_ < 1 || h_ < 1 || w_ < 1) {
      throw InputError(file.path() + ": tensor '" + name + "' is empty", kExitDataErr);
    }
    if (info_.dtype != "F32" && info_.dtype != "F64") {
      throw InputError(
          file.path() + ": tensor '" + name + "' is " + info_.dtype + "; frames must be F32 or F64",
          kExitDataErr);
    }
  }
  int64_t frames() const { return n_; }
  int height() const { return int(h_); }
  int width() const { return int(w_); }

  bool next(SliceWork& out) override {
    if (next_frame_ >= n_) return false;
    const int64_t count = std::min<int64_t>(slice_frames_, n_ - next_frame_);
    out.index = index_;
    out.first = index_ == 0;
    out.last = next_frame_ + count == n_;
    out.padded = 0;
    out.input = Planar(int(c_), int(count), int(h_), int(w_));
    const size_t plane = size_t(h_) * w_;
    const auto* bytes = static_cast<const unsigned char*>(info_.data);
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t c = 0; c < c_; ++c) {
        const size_t first = (size_t(next_frame_ + t) * c_ + c) * plane;
        float* dst = out.input.plane(int(c), int(t));
        if (info_.dtype == "F32") {
          std::memcpy(dst, bytes + first * 4, plane * 4);
        } else {
          for (size_t i = 0; i < plane; ++i) {
            double d;
            std::memcpy(&d, bytes + (first + i) * 8, 8);
            dst[i] = float(d);
          }
        }
      }
    }
    out.frames.clear();
    for (int64_t t = 0; t < count; ++t) out.frames.push_back({next_frame_ + t, next_frame_ + t, 1});
    next_frame_ += count;
    ++index_;
    return true;
  }

 private:
  const io::TensorInfo& info_;
  int slice_frames_;
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0;
  int64_t next_frame_ = 0;
  int64_t index_ = 0;
};

// Gathers the slices' frames into one [N, C, H', W'] block (frame-major, as written).
class FrameTensorSink : public SliceSink {
 public:
  FrameTensorSink(int64_t frames, Progress& progress) : frames_(frames), progress_(progress) {}
  void write(SliceResult&& r) override {
    const Planar& p = r.output;
    if (data_.empty()) {
      c_ = p.channels, h_ = p.height, w_ = p.width;
      data_.resize(size_t(frames_) * c_ * h_ * w_);
    }
    if (p.channels != c_ || p.height != h_ || p.width != w_ || written_ + p.frames > frames_) {
      throw Error("upscale: a slice's output does not fit the others", kExitSoftware);
    }
    for (int t = 0; t < p.frames; ++t) {
      for (int c = 0; c < c_; ++c) {
        std::memcpy(data_.data() + (size_t(written_ + t) * c_ + c) * p.plane_size(), p.plane(c, t),
                    sizeof(float) * p.plane_size());
      }
    }
    written_ += p.frames;
    progress_.add(p.frames);
  }
  int64_t written() const { return written_; }
  int channels() const { return c_; }
  int height() const { return h_; }
  int width() const { return w_; }
  const std::vector<float>& data() const { return data_; }

 private:
  int64_t frames_;
  Progress& progress_;
  int c_ = 0, h_ = 0, w_ = 0;
  int64_t written_ = 0;
  std::vector<float> data_;
};

}  // namespace

TaskResult upscale_tensor(const JobSpec& job, const ModelSet& models, const std::string& input,
                          const std::string& output, const RunOptions& options,
                          Progress& progress) {
  const auto output_is_tensor = [&] {
    const std::string tail = ".safetensors";
    return output.size() >= tail.size() &&
           output.compare(output.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!output_is_tensor()) {
    throw ConfigError(
        job.file, job.line, "output",
        "a .safetensors input is upscaled into a .safetensors output (got '" + output + "')");
  }
  io::SafetensorsFile file(input);
  const ModelTraits& traits = models.traits();
  const auto& shape = file.info(job.input_tensor).shape;
  FrameTensorSource source(file, job.input_tensor, traits.in_channels,
                           job_slice_rule(job, traits, 0, 0));
  PipelineOptions pipeline;
  pipeline.tokens = job.tokens;
  pipeline.cancel = options.cancel;
  pipeline.tiles = plan_job_tiles(job, traits, source.width(), source.height());
  PipelineStats stats;
  pipeline.stats = &stats;
  auto sessions = models.open_sessions();
  FrameTensorSink sink(source.frames(), progress);
  progress.begin(input, source.frames());
  run_pipeline(source, sessions, sink, pipeline);
  sessions.clear();
  progress.end();
  if (sink.written() != source.frames()) {
    throw Error(output + ": wrote " + std::to_string(sink.written()) + " frames of " +
                    std::to_string(source.frames()),
                kExitSoftware);
  }
  io::TensorEntry entry;
  entry.name = "output";
  entry.shape = {sink.channels(), sink.height(), sink.width()};
  if (shape.size() == 4) entry.shape.insert(entry.shape.begin(), source.frames());
  entry.data = sink.data().data();
  entry.bytes = sink.data().size() * sizeof(float);
  io::write_safetensors(
      output, {entry},
      {{"source", input},
       {"model", traits.name},
       {"scale", std::to_string(traits.scale_num) + "/" + std::to_string(traits.scale_den)}});
  return TaskResult{source.frames(), stage_metrics(stats), {}};
}

}  // namespace wm::sched
