// The VAE tasks (wan2.1-vae, seedvr2-vae): decode_latents (latents → video or tensor),
// encode_latents (video or tensor → latents with metadata) and reconstruct (video → VAE → video,
// with PSNR/SSIM).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "io/video_reader.h"
#include "io/video_writer.h"
#include "scheduler/causal_state.h"
#include "scheduler/quality.h"
#include "scheduler/tasks.h"
#include "scheduler/video_stages.h"
#include "src/base/clock.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"
#include "src/models/registry.h"
#include "src/weights/safetensors.h"

namespace wm::sched {
namespace {

// Video values [0,1] ↔ the VAE's [-1,1].
constexpr ValueMap kVaeRange{2.0f, -1.0f};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Converts `n` elements of `t` starting at element `offset` to float.
void to_float(const io::TensorInfo& t, const std::string& path, size_t offset, size_t n,
              float* out) {
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  if (t.dtype == "F32") {
    std::memcpy(out, bytes + offset * 4, n * 4);
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, bytes + (offset + i) * 8, 8);
      out[i] = float(d);
    }
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    const bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + (offset + i) * 2, 2);
      if (bf) {
        const uint32_t bits = uint32_t(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      } else {
        out[i] = half_to_float(h);
      }
    }
  } else {
    throw InputError(path + ": tensor dtype " + t.dtype + " is not a float type (F32/F16/BF16)");
  }
}

// The most frames a latent file's "frames" metadata may say (as a farm's frame ranges).
constexpr double kMaxLatentFileFrames = double(int64_t(1) << 40);

// The scale rule of a model's latent files: file latent = (z − shift) · scale, where z is what
// the VAE's decode receives and its encode gives (seedvr2-vae: 0.9152 and 0, applied outside the
// VAE as in the official pipeline, ../shared/seedvr2-vae-spec.md §1). Files carry it in their
// metadata (`latent_scale`, `latent_shift`). Off for wan2.1-vae, which normalises inside.
struct LatentRule {
  bool on = false;
  double scale = 1.0;
  double shift = 0.0;

  static LatentRule of(const ModelConfig& config) {
    const LatentFileRule files = latent_file_rule(config);
    if (!files.affine) return {};
    return {true, files.scale, files.shift};
  }
  // The rule `file` carries, else this one.
  LatentRule for_file(const io::SafetensorsFile& file) const {
    if (!on) return *this;
    LatentRule r = *this;
    constexpr double kMax = std::numeric_limits<double>::max();
    r.scale = file.metadata_number("latent_scale", 0, kMax, false, true).value_or(r.scale);
    r.shift = file.metadata_number("latent_shift", -kMax, kMax).value_or(r.shift);
    return r;
  }
  void add_metadata(std::map<std::string, std::string>& meta) const;
};

// A [C, T, H, W] (or [1, C, T, H, W]) tensor of a safetensors file, cut along T into slices
// under `rule`; the last slice is padded by repeating its last frame when the rule needs it.
// With a latent rule on, the values are mapped back to what the VAE receives (v / scale + shift).
class TensorSliceSource : public SliceSource {
 public:
  TensorSliceSource(const io::SafetensorsFile& file, const std::string& name, int channels,
                    const SliceRule& rule, const LatentRule& latent = {})
      : file_(file), info_(file.info(name)), rule_(rule), latent_(latent) {
    const auto& s = info_.shape;
    const bool batched = s.size() == 5 && s[0] == 1;
    if (s.size() != 4 && !batched) {
      throw InputError(file.path() + ": tensor '" + name + "' must be [C,T,H,W] or [1,C,T,H,W]",
                       kExitDataErr);
    }
    const size_t o = batched ? 1 : 0;
    c_ = s[o], t_ = s[o + 1], h_ = s[o + 2], w_ = s[o + 3];
    if (c_ != channels) {
      throw InputError(file.path() + ": tensor '" + name + "' has " + std::to_string(c_) +
                           " channels, the model expects " + std::to_string(channels),
                       kExitDataErr);
    }
    if (t_ < 1 || h_ < 1 || w_ < 1)
      throw InputError(file.path() + ": tensor '" + name + "' is empty");
    end_ = t_;
  }
  int64_t frames() const { return t_; }
  int height() const { return int(h_); }
  int width() const { return int(w_); }
  // Farm chunks: only frames [first, end) (end < 0: to the last); with first > 0 they continue a
  // sequence whose earlier slices the model has seen (VideoSliceSource::continue_sequence).
  void set_range(int64_t first, int64_t end) {
    next_frame_ = first;
    end_ = end < 0 ? t_ : std::min(end, t_);
  }

  bool next(SliceWork& out) override {
    if (next_frame_ >= end_) return false;
    const bool starts = index_ == 0 && next_frame_ == 0;
    const int64_t want = starts ? rule_.first_frames : rule_.slice_frames;
    const int64_t real = std::min<int64_t>(want, end_ - next_frame_);
    out.index = index_;
    out.first = starts;
    out.last = next_frame_ + real == t_;
    out.padded = out.last ? int(pad_frames(real, rule_.group, out.first ? rule_.offset : 0)) : 0;
    out.input = Planar(int(c_), int(real) + out.padded, int(h_), int(w_));
    const size_t plane = size_t(h_) * w_;
    for (int64_t c = 0; c < c_; ++c) {
      for (int64_t t = 0; t < real + out.padded; ++t) {
        const int64_t src_t = next_frame_ + std::min(t, real - 1);
        float* p = out.input.plane(int(c), int(t));
        to_float(info_, file_.path(), size_t((c * t_ + src_t)) * plane, plane, p);
        if (latent_.on) {
          for (size_t i = 0; i < plane; ++i) p[i] = float(p[i] / latent_.scale + latent_.shift);
        }
      }
    }
    out.frames.clear();
    for (int64_t t = 0; t < real; ++t) out.frames.push_back({next_frame_ + t, next_frame_ + t, 1});
    next_frame_ += real;
    ++index_;
    return true;
  }

 private:
  const io::SafetensorsFile& file_;
  const io::TensorInfo& info_;
  SliceRule rule_;
  LatentRule latent_;
  int64_t c_ = 0, t_ = 0, h_ = 0, w_ = 0;
  int64_t next_frame_ = 0;
  int64_t end_ = 0;
  int64_t index_ = 0;
};

// Collects every output frame; `limit` trims the total (padding of encoded inputs).
class TensorSink : public SliceSink {
 public:
  explicit TensorSink(Progress* progress = nullptr) : progress_(progress) {}
  // Farm chunks: slices of input frames before `frame` (context that rebuilt the causal state)
  // are dropped; `on_slice` hears of each kept one (input frames kept so far).
  void set_write_from(int64_t frame) { write_from_ = frame; }
  void set_on_slice(std::function<void(int64_t, int64_t)> f) { on_slice_ = std::move(f); }
  int64_t input_frames() const { return input_frames_; }
  void write(SliceResult&& r) override {
    if (!r.frames.empty() && r.frames.back().index < write_from_) return;
    if (progress_) progress_->add(int64_t(r.frames.size()));
    input_frames_ += int64_t(r.frames.size());
    if (on_slice_) on_slice_(r.index, input_frames_);
    frames_ += r.output.frames;
    slices_.push_back(std::move(r.output));
  }
  // Concatenates along T: [C, frames, H, W], at most `limit` frames when limit >= 0.
  Planar take(int64_t limit = -1) {
    if (slices_.empty()) throw Error("no output produced", kExitSoftware);
    const int64_t total = limit >= 0 ? std::min(limit, frames_) : frames_;
    const Planar& first = slices_.front();
    Planar out(first.channels, int(total), first.height, first.width);
    for (int c = 0; c < out.channels; ++c) {
      int64_t t = 0;
      for (const Planar& s : slices_) {
        for (int i = 0; i < s.frames && t < total; ++i, ++t) {
          std::memcpy(out.plane(c, int(t)), s.plane(c, i), sizeof(float) * s.plane_size());
        }
      }
    }
    slices_.clear();
    return out;
  }

 private:
  Progress* progress_;
  int64_t frames_ = 0;
  int64_t input_frames_ = 0;
  int64_t write_from_ = 0;
  std::function<void(int64_t, int64_t)> on_slice_;
  std::vector<Planar> slices_;
};

// Writes each planar as a float32 [1, C, T, H, W] tensor under its name.
void write_tensors(const std::string& path,
                   const std::vector<std::pair<std::string, const Planar*>>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::vector<io::TensorEntry> entries;
  for (const auto& [name, p] : tensors) {
    io::TensorEntry entry;
    entry.name = name;
    entry.dtype = "F32";
    entry.shape = {1, p->channels, p->frames, p->height, p->width};
    entry.data = p->data.data();
    entry.bytes = p->data.size() * sizeof(float);
    entries.push_back(entry);
  }
  io::write_safetensors(path, entries, metadata);
}

void write_tensor(const std::string& path, const std::string& name, const Planar& p,
                  const std::map<std::string, std::string>& metadata) {
  write_tensors(path, {{name, &p}}, metadata);
}

// Channels [c0, c0 + n) of `p`.
Planar channels_of(const Planar& p, int c0, int n) {
  Planar out(n, p.frames, p.height, p.width);
  std::memcpy(out.data.data(), p.plane(c0, 0), out.data.size() * sizeof(float));
  return out;
}

// The shortest decimal text that reads back as `v` (metadata the decoder parses again).
std::string exact_number(double v) {
  for (int digits = 6; digits < 17; ++digits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) return text;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

std::string number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

io::Rational rational_fps(double fps) {
  // Common NTSC rates exactly; others to the millisecond.
  for (int base : {24, 30, 60}) {
    if (std::fabs(fps - base * 1000.0 / 1001.0) < 1e-3) return {base * 1000, 1001};
  }
  return {int(std::lround(fps * 1000)), 1000};
}

void LatentRule::add_metadata(std::map<std::string, std::string>& meta) const {
  if (!on) return;
  meta["latent_scale"] = exact_number(scale);
  meta["latent_shift"] = exact_number(shift);
}

// The sides the kind's encoder takes (registry: encode_side_multiple).
void check_encode_sides(const std::string& path, int width, int height, const ModelConfig& model) {
  const ModelKind* kind = find_model_kind(model.kind);
  const int m = kind ? kind->encode_side_multiple : 0;
  if (m > 1 && (width % m || height % m)) {
    throw InputError(path + ": frame size " + std::to_string(width) + "x" + std::to_string(height) +
                         " is not a multiple of " + std::to_string(m) + ", which the " +
                         model.kind + " encoder needs (resize or crop first)",
                     kExitDataErr);
  }
}

using Sessions = std::vector<std::unique_ptr<ModelSession>>;

// The causal model state of an input's farm chunks (RunOptions::carry) in one runner, in the
// farm's frames (the task's output frames). A chunk after the first continues the state of the
// chunk before it: from the sessions kept since the previous call when that call ran the chunk
// before (one process running an input's chunks in order costs what one whole run costs), else
// from a saved state, else over every frame before it (the exact prefix recompute).
class ChunkCarrier {
 public:
  // Fills `sessions` for a chunk and returns the frame the model starts at: write_from (kept
  // sessions), a saved state's frame, or first_frame (fresh sessions from `open`). `boundary(f)`:
  // the sequence's slices start at frame f (f > 0).
  int64_t begin(const std::string& input, const std::string& log_name, const RunOptions& options,
                const std::function<bool(int64_t)>& boundary, const std::function<Sessions()>& open,
                Sessions& sessions) {
    auto log = log::get(log_name);
    CausalCarry* carry = options.carry;
    const int64_t write_from = std::max(options.first_frame, options.write_from_frame);
    int64_t start = options.first_frame;
    sessions = std::move(kept_);
    const bool continues = write_from > start && boundary(write_from);
    if (!sessions.empty() &&
        (!carry || !continues || sequence_ != carry->sequence || next_ != write_from)) {
      sessions.clear();
    }
    if (carry) carry->resumed.clear();
    if (!sessions.empty()) {
      if (carry) carry->resumed = "session";
      return write_from;
    }
    sessions = open();
    const int64_t state_next = carry && carry->resume_next >= 0 ? carry->resume_next : write_from;
    if (!carry || !continues || carry->resume_from.empty() || !(state_next > start) ||
        state_next > write_from || !boundary(state_next)) {
      return start;
    }
    std::string why;
    auto state = load_causal_state(carry->resume_from, carry->sequence, state_next,
                                   carry->resume_size, &why);
    if (state && sessions.size() == 1 && sessions.front()->import_state(*state)) {
      carry->resumed = "state";
      if (state_next == write_from) {
        log->info("{}: resuming at frame {} from the saved state {}", input, write_from,
                  carry->resume_from);
      } else {
        log->info(
            "{}: resuming at frame {} from the saved state {} (frames {}-{} run again to reach "
            "it)",
            input, write_from, carry->resume_from, state_next, write_from - 1);
      }
      return state_next;
    }
    if (state) why = "it does not fit the model";
    log->warn(
        "{}: the saved state {} is not usable ({}); running the model over frames {}-{} again "
        "to rebuild it",
        input, carry->resume_from, why, start, write_from - 1);
    sessions = open();  // a failed import may have taken part of the state
    return start;
  }

  // After a chunk: one that stopped before its input's end hands its state on, in memory and
  // (when asked, and the state is one session's) in a file.
  void end(const RunOptions& options, Sessions& sessions) {
    CausalCarry* carry = options.carry;
    if (!carry || options.end_frame < 0) return;
    carry->saved_bytes = 0;
    if (!carry->save_to.empty()) {
      std::vector<StateTensor> state;
      const auto saving = std::chrono::steady_clock::now();
      if (sessions.size() == 1 && sessions.front()->export_state(state)) {
        fs::remove_stale_temps(carry->save_to);
        carry->saved_bytes =
            save_causal_state(carry->save_to, state, carry->sequence, options.end_frame);
      }
      carry->save_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - saving).count();
    }
    kept_ = std::move(sessions);
    sequence_ = carry->sequence;
    next_ = options.end_frame;
  }

 private:
  // The sessions of the last chunk that stopped before its input's end, and where it stopped.
  Sessions kept_;
  std::string sequence_;
  int64_t next_ = -1;
};

// A farm segment holds the video only (assembly muxes the rest once) in the source's exact time
// scale.
void configure_segment(io::WriterConfig& config, const RunOptions& options) {
  if (!options.segment) return;
  config.encode.copy_audio = false;
  config.encode.copy_subtitles = false;
  config.encode.copy_other = false;
  config.exact_timescale = true;
}

class DecodeLatentsRunner : public FinishingRunner {
 public:
  explicit DecodeLatentsRunner(const JobSpec& job)
      : job_(job), models_(job.model, job.devices, job.device_ids, job.parallel) {}

  const ModelSet* model_set() const override { return &models_; }

 private:
  PendingOutput run(const std::string& input, const std::string& output, const RunOptions& options,
                    Progress& progress, bool background) override {
    const auto input_start = Clock::now();
    io::SafetensorsFile file(input);
    const ModelTraits& traits = models_.traits();
    TensorSliceSource source(file, job_.input_tensor, traits.in_channels,
                             make_slice_rule(decode_slice_frames(job_), 1, 0),
                             LatentRule::of(job_.model).for_file(file));
    int64_t frames = models_.model().output_frames(source.frames());
    // Latents of a padded clip: trim back to the source's frame count. A file's "frames" and
    // "fps" are checked (a bad value names the file, exit 65), as job values are.
    if (const auto n = file.metadata_number("frames", 1, kMaxLatentFileFrames, true)) {
      frames = std::min<int64_t>(frames, int64_t(*n));
    }
    double fps = job_.fps;
    if (fps <= 0) fps = file.metadata_number("fps", 0, 1000, false, true).value_or(16.0);
    PipelineOptions pipeline;
    pipeline.tokens = job_.tokens;
    pipeline.cancel = options.cancel;
    pipeline.tiles = plan_job_tiles(job_, traits, source.width(), source.height());
    models_.check_rows(job_, input, pipeline.tiles);
    const double input_open_seconds = seconds_since(input_start);
    // Farm chunks are in output frames, on latent slice boundaries (farm_plan.cpp
    // make_latent_chunk_rule): latent L starts output frame output_frames(L).
    const Model& model = models_.model();
    const int64_t slice = decode_slice_frames(job_);
    auto latent_at = [&](int64_t frame) -> int64_t {
      for (int64_t l = 0; l <= source.frames(); ++l) {
        if (model.output_frames(l) == frame) return l;
      }
      return -1;
    };
    const auto open_start = Clock::now();
    Sessions sessions;  // the first one opened uploads the weights
    const int64_t start = carrier_.begin(
        input, "job:" + job_.name, options,
        [&](int64_t frame) {
          const int64_t l = latent_at(frame);
          return l > 0 && l % slice == 0;
        },
        [&] { return models_.open_sessions(); }, sessions);
    const int64_t end = options.end_frame < 0 ? -1 : latent_at(options.end_frame);
    if (latent_at(start) < 0 || (options.end_frame >= 0 && end < 0)) {
      throw Error(input + ": frames " + std::to_string(start) + "-" +
                      std::to_string(options.end_frame) + " do not start and end on latent frames",
                  kExitSoftware);
    }
    source.set_range(latent_at(start), end);
    const int64_t write_from = std::max(options.first_frame, options.write_from_frame);
    pipeline.devices = models_.session_devices();
    const DeviceMeter meter(models_);
    const double open_seconds = seconds_since(open_start);
    progress.begin(
        input,
        std::max<int64_t>(0, (options.end_frame < 0 ? frames : options.end_frame) - write_from));
    PipelineStats stats;
    pipeline.stats = &stats;
    // Ends the sessions (their threads, device buffers) and the progress; the input's metrics.
    auto close = [&](std::map<std::string, double> metrics) {
      const std::map<std::string, double> device_metrics = meter.metrics(sessions);
      metrics.insert(device_metrics.begin(), device_metrics.end());
      carrier_.end(options, sessions);  // a chunk before the end keeps them
      const auto close_start = Clock::now();
      sessions.clear();
      metrics["input_open_seconds"] = input_open_seconds;
      metrics["sessions_open_seconds"] = open_seconds;
      metrics["sessions_close_seconds"] = seconds_since(close_start);
      progress.end();
      return metrics;
    };

    if (ends_with(output, ".safetensors")) {
      TensorSink sink(&progress);
      run_pipeline(source, sessions, sink, pipeline);
      TaskResult result{0, close(stage_metrics(stats)), {}};
      Planar out = sink.take(frames);
      write_tensor(output, "output", out,
                   {{"source", input},
                    {"fps", number(fps)},
                    {"frames", std::to_string(out.frames)},
                    {"model", traits.name}});
      result.frames = out.frames;
      return PendingOutput(std::move(result));
    }
    io::WriterConfig config;
    config.path = output;
    config.width = pipeline.tiles.out_width() & ~1;
    config.height = pipeline.tiles.out_height() & ~1;
    config.frame_rate = rational_fps(fps);
    config.time_base = {config.frame_rate.den, config.frame_rate.num};
    config.encode = encode_settings(job_.encode, models_.devices(), options);
    configure_segment(config, options);
    const auto writer_start = Clock::now();
    auto writer = std::make_unique<io::VideoWriter>(config);
    const double writer_open_seconds = seconds_since(writer_start);
    VideoFileSink sink(*writer, config.width, config.height, /*same_timing=*/false, kVaeRange,
                       &progress);
    sink.set_limit(frames);
    sink.set_first_frame(start);
    sink.set_write_from(write_from);
    if (options.on_slice) sink.set_on_slice(options.on_slice);
    run_pipeline(source, sessions, sink, pipeline);
    TaskResult result{0, close(stage_metrics(stats)), {}};
    add_size_metrics(result, source.width(), source.height(), config.width, config.height);
    result.metrics["writer_open_seconds"] = writer_open_seconds;
    result.metrics["sink_extract_seconds"] = sink.extract_seconds();
    // The encoder's flush, fsync and verify: a serial tail after the graph, which the job's next
    // input overlaps when `background`.
    return finish_video(std::move(writer), std::move(result), background);
  }

  JobSpec job_;
  ModelSet models_;
  ChunkCarrier carrier_;
};

class EncodeLatentsRunner : public TaskRunner {
 public:
  explicit EncodeLatentsRunner(const JobSpec& job)
      : job_(job), models_(job.model, job.devices, job.device_ids, job.parallel) {}
  const ModelSet* model_set() const override { return &models_; }

  int64_t process(const std::string& input, const std::string& output, const RunOptions& options,
                  Progress& progress) override {
    const ModelTraits& traits = models_.traits();
    const SliceRule rule = job_slice_rule(job_, traits, 0, 0);
    PipelineOptions pipeline;
    pipeline.tokens = job_.tokens;
    pipeline.cancel = options.cancel;
    Sessions sessions;
    TensorSink sink(&progress);
    std::map<std::string, std::string> meta = {{"source", input}, {"model", traits.name}};
    int64_t frames = 0;
    decoder_.clear();
    if (ends_with(input, ".safetensors")) {
      io::SafetensorsFile file(input);
      TensorSliceSource source(file, job_.input_tensor, traits.in_channels, rule);
      sessions = models_.open_sessions();
      pipeline.devices = models_.session_devices();
      check_encode_sides(input, source.width(), source.height(), job_.model);
      pipeline.tiles = plan_job_tiles(job_, traits, source.width(), source.height());
      frames = source.frames();
      progress.begin(input, frames);
      run_pipeline(source, sessions, sink, pipeline);
      meta["width"] = std::to_string(source.width());
      meta["height"] = std::to_string(source.height());
      if (file.metadata_number("fps", 0, 1000, false, true))
        meta["fps"] = file.metadata().at("fps");
    } else {
      io::VideoReader reader(input, reader_options(job_, models_.devices(), options));
      const io::VideoInfo& info = reader.info();
      check_encode_sides(input, info.width, info.height, job_.model);
      pipeline.tiles = plan_job_tiles(job_, traits, info.width, info.height);
      // Farm chunks start on slice boundaries (scheduler/farm.h) and continue the causal state
      // of the chunk before (ChunkCarrier); a whole run is the chunk of every frame.
      const int64_t start = carrier_.begin(
          input, "job:" + job_.name, options,
          [&](int64_t frame) {
            return frame >= rule.first_frames &&
                   (frame - rule.first_frames) % rule.slice_frames == 0;
          },
          [&] { return models_.open_sessions(); }, sessions);
      pipeline.devices = models_.session_devices();
      const int64_t write_from = std::max(options.first_frame, options.write_from_frame);
      VideoSliceSource source(reader, rule, kVaeRange, start, options.end_frame);
      if (start > 0) source.continue_sequence();
      sink.set_write_from(write_from);
      if (options.on_slice) sink.set_on_slice(options.on_slice);
      int64_t frames_total = info.frames_estimate - write_from;
      if (options.end_frame >= 0) frames_total = options.end_frame - write_from;
      progress.begin(input, std::max<int64_t>(frames_total, 0));
      run_pipeline(source, sessions, sink, pipeline);
      carrier_.end(options, sessions);  // a chunk before the end keeps them
      frames = sink.input_frames();
      decoder_ = reader.decoder_name();
      meta["fps"] = number(info.frame_rate.value());
      meta["width"] = std::to_string(info.width);
      meta["height"] = std::to_string(info.height);
    }
    Planar latents = sink.take();
    meta["frames"] = std::to_string(frames);
    meta["latent_frames"] = std::to_string(latents.frames);
    const LatentRule rule_out = LatentRule::of(job_.model);
    rule_out.add_metadata(meta);
    if (rule_out.on) {
      // The posterior mean in the file's latent space; the logvar (when asked for) stays the
      // VAE's own, in a tensor of its own.
      const bool with_logvar = latent_file_rule(job_.model).logvar;
      const int mean_channels = with_logvar ? latents.channels / 2 : latents.channels;
      Planar mean = channels_of(latents, 0, mean_channels);
      for (float& v : mean.data) v = float((v - rule_out.shift) * rule_out.scale);
      if (with_logvar) {
        const Planar logvar = channels_of(latents, mean_channels, latents.channels - mean_channels);
        write_tensors(output, {{"latent", &mean}, {"latent_logvar", &logvar}}, meta);
      } else {
        write_tensor(output, "latent", mean, meta);
      }
    } else {
      write_tensor(output, "latent", latents, meta);
    }
    progress.end();
    // A farm segment counts the input frames it covers (the farm's frames).
    return options.segment ? frames : latents.frames;
  }
  std::string decoder() const override { return decoder_; }

 private:
  JobSpec job_;
  ModelSet models_;
  std::string decoder_;
  ChunkCarrier carrier_;
};

// Encoder then decoder in one session, measuring the round trip against its input.
class ReconstructSession : public ModelSession {
 public:
  ReconstructSession(std::unique_ptr<ModelSession> encoder, std::unique_ptr<ModelSession> decoder)
      : encoder_(std::move(encoder)), decoder_(std::move(decoder)) {}
  // Where the round trip's quality goes (set before each input's pipeline runs).
  void set_meter(QualityMeter* meter) { meter_ = meter; }
  Planar run(Planar&& input, const RunContext& ctx) override {
    Planar reference = input.clone();
    RunContext inner = ctx;
    inner.deferred = nullptr;  // the output is measured here, at once
    Planar out = decoder_->run(encoder_->run(std::move(input), inner), inner);
    if (out.frames != reference.frames) {
      throw Error("reconstruct: decoder returned " + std::to_string(out.frames) + " frames for " +
                      std::to_string(reference.frames),
                  kExitSoftware);
    }
    for (int t = 0; meter_ && t < reference.frames - ctx.padded_frames; ++t) {
      meter_->add_frame(reference, out, t, kVaeRange.scale, kVaeRange.bias);
    }
    return out;
  }
  // Both halves' state, named "encode/..." and "decode/...".
  bool export_state(std::vector<StateTensor>& out) const override {
    std::vector<StateTensor> enc, dec;
    if (!encoder_->export_state(enc) || !decoder_->export_state(dec)) return false;
    for (StateTensor& t : enc) out.push_back(std::move(t)), out.back().name.insert(0, "encode/");
    for (StateTensor& t : dec) out.push_back(std::move(t)), out.back().name.insert(0, "decode/");
    return true;
  }
  // On false either half may have taken its part: do not run this session further.
  bool import_state(const std::vector<StateTensor>& in) override {
    return encoder_->import_state(state_part(in, "encode/")) &&
           decoder_->import_state(state_part(in, "decode/"));
  }

 private:
  std::unique_ptr<ModelSession> encoder_;
  std::unique_ptr<ModelSession> decoder_;
  QualityMeter* meter_ = nullptr;
};

// Video → encoder → decoder → video. Runs farm chunks (RunOptions first/end/write_from frame),
// each continuing the causal state of the chunk before it (ChunkCarrier).
class ReconstructRunner : public TaskRunner {
 public:
  explicit ReconstructRunner(const JobSpec& job)
      : job_(job),
        encoder_(with_task(job.model, "encode"), job.devices, job.device_ids),
        decoder_(with_task(job.model, "decode"), job.devices, job.device_ids) {}

  int64_t process(const std::string& input, const std::string& output, const RunOptions& options,
                  Progress& progress) override {
    auto log = log::get("job:" + job_.name);
    io::VideoReader reader(input, reader_options(job_, encoder_.devices(), options));
    const io::VideoInfo& info = reader.info();
    check_encode_sides(input, info.width, info.height, job_.model);
    const ModelTraits& traits = encoder_.traits();
    const SliceRule rule = job_slice_rule(job_, traits, info.width, info.height);

    // Chunks start on slice boundaries (scheduler/farm.h).
    Sessions sessions;
    const int64_t start = carrier_.begin(
        input, "job:" + job_.name, options,
        [&](int64_t frame) {
          return frame >= rule.first_frames && (frame - rule.first_frames) % rule.slice_frames == 0;
        },
        [&] {
          Sessions fresh;
          fresh.push_back(open_session());
          return fresh;
        },
        sessions);
    const int64_t write_from = std::max(options.first_frame, options.write_from_frame);
    auto* session = static_cast<ReconstructSession*>(sessions.front().get());
    QualityMeter meter;
    session->set_meter(&meter);

    PipelineOptions pipeline;
    pipeline.tokens = job_.tokens;
    pipeline.cancel = options.cancel;
    pipeline.devices = {decoder_.devices().front()};
    // PSNR/SSIM need whole frames: the round trip runs untiled.
    pipeline.tiles = plan_tiles(info.width, info.height, 0, 0, 0, 0);

    io::WriterConfig config;
    config.path = output;
    config.width = info.width;
    config.height = info.height;
    config.time_base = info.time_base;
    config.frame_rate = info.frame_rate;
    config.source_path = input;
    config.source = info;
    config.encode = encode_settings(job_.encode, decoder_.devices(), options);
    configure_segment(config, options);
    io::VideoWriter writer(config);
    VideoSliceSource source(reader, rule, kVaeRange, start, options.end_frame);
    if (start > 0) source.continue_sequence();
    VideoFileSink sink(writer, info.width, info.height, /*same_timing=*/true, kVaeRange, &progress);
    sink.set_write_from(write_from);
    if (options.on_slice) sink.set_on_slice(options.on_slice);
    int64_t frames_total = info.frames_estimate - write_from;
    if (options.end_frame >= 0) frames_total = options.end_frame - write_from;
    progress.begin(input, std::max<int64_t>(frames_total, 0));
    run_pipeline(source, sessions, sink, pipeline);
    const int64_t written = writer.finish();
    progress.end();
    session->set_meter(nullptr);
    decoder_name_ = reader.decoder_name();
    dropped_ = writer.dropped();
    metrics_ = {{"psnr", meter.psnr()},       {"ssim", meter.ssim()},
                {"input_width", info.width},  {"input_height", info.height},
                {"output_width", info.width}, {"output_height", info.height}};
    log->info("{}: reconstruction PSNR {:.2f} dB, SSIM {:.4f} over {} frames", input, meter.psnr(),
              meter.ssim(), meter.frames());
    carrier_.end(options, sessions);
    return written;
  }
  std::map<std::string, double> metrics() const override { return metrics_; }
  std::string decoder() const override { return decoder_name_; }
  std::vector<std::string> dropped() const override { return dropped_; }

 private:
  static ModelConfig with_task(ModelConfig config, const char* task) {
    config.task = task;
    return config;
  }
  std::unique_ptr<ReconstructSession> open_session() const {
    auto enc = encoder_.open_sessions();
    auto dec = decoder_.open_sessions();
    return std::make_unique<ReconstructSession>(std::move(enc.front()), std::move(dec.front()));
  }
  JobSpec job_;
  ModelSet encoder_;
  ModelSet decoder_;
  std::map<std::string, double> metrics_;
  std::string decoder_name_;
  std::vector<std::string> dropped_;
  ChunkCarrier carrier_;
};

}  // namespace

std::unique_ptr<TaskRunner> make_latent_task_runner(const JobSpec& job) {
  switch (job.task) {
    case Task::kDecodeLatents:
      return std::make_unique<DecodeLatentsRunner>(job);
    case Task::kEncodeLatents:
      return std::make_unique<EncodeLatentsRunner>(job);
    case Task::kReconstruct:
      return std::make_unique<ReconstructRunner>(job);
    default:
      throw ConfigError(job.file, job.line, "task", "not a latent task");
  }
}

}  // namespace wm::sched
