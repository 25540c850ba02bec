#include "scheduler/farm.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "io/image_output.h"
#include "io/output_file.h"
#include "io/segments.h"
#include "scheduler/fingerprint.h"
#include "scheduler/journal.h"
#include "scheduler/latent_segments.h"
#include "scheduler/preflight.h"
#include "scheduler/runner.h"
#include "scheduler/tasks.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/json_text.h"
#include "src/base/log.h"
#include "src/base/std_streams.h"
#include "src/weights/safetensors.h"

namespace wm::sched {

// ---------------------------------------------------------------------------------------------
// Chunk geometry (pure)

ChunkRule make_chunk_rule(const ModelTraits& traits, const SliceRule& slices,
                          int64_t chunk_frames) {
  if (chunk_frames <= 0) chunk_frames = kDefaultChunkFrames;
  ChunkRule rule;
  rule.causal = traits.causal_state;
  if (!rule.causal && traits.slice_overlap > 0) {
    // Whole batches: boundaries where a batch's new frames start (a seam), after the first.
    const int64_t stride = slices.slice_frames;
    const int64_t k = std::max<int64_t>(1, chunk_frames / stride);
    rule.first_frames = k * stride;
    rule.frames = k * stride;
    rule.align_first = stride;
    rule.align = stride;
    rule.context_before = stride;
    rule.context_after = traits.slice_overlap;
    return rule;
  }
  if (rule.causal) {
    // Whole slices, so that every slice is the one a single run feeds the model.
    const int64_t k = std::max<int64_t>(1, chunk_frames / slices.slice_frames);
    rule.first_frames = slices.first_frames + (k - 1) * slices.slice_frames;
    rule.frames = k * slices.slice_frames;
    rule.align_first = slices.first_frames;
    rule.align = slices.slice_frames;
  } else {
    // Whole frame groups (offset + group*k first, group*k after).
    const int64_t group = std::max(1, traits.frame_group);
    const int64_t offset = std::max(0, traits.frame_offset);
    const int64_t k = std::max<int64_t>(1, chunk_frames / group);
    rule.first_frames = offset + k * group;
    rule.frames = k * group;
    rule.align_first = offset;
    rule.align = group;
  }
  return rule;
}

ChunkRule make_latent_chunk_rule(const ModelTraits& encoder, int64_t slice_latents,
                                 int64_t chunk_frames) {
  if (chunk_frames <= 0) chunk_frames = kDefaultChunkFrames;
  const int64_t group = std::max(1, encoder.frame_group);
  const int64_t offset = std::max(0, encoder.frame_offset);
  const int64_t slice = std::max<int64_t>(1, slice_latents);
  const auto frames_of = [&](int64_t latents) { return offset + group * (latents - 1); };
  const int64_t k = std::max<int64_t>(1, chunk_frames / (group * slice));
  ChunkRule rule;
  rule.causal = true;
  rule.first_frames = frames_of(k * slice);
  rule.frames = group * k * slice;
  rule.align_first = frames_of(slice);
  rule.align = group * slice;
  return rule;
}

std::vector<ChunkRange> plan_chunks(int64_t frames, const ChunkRule& rule) {
  std::vector<ChunkRange> out;
  if (frames <= 0) {
    out.push_back({0, -1, 0, 0});
    return out;
  }
  int64_t first = 0;
  while (first < frames) {
    const int64_t want = first == 0 ? rule.first_frames : rule.frames;
    const int64_t last = std::min(frames, first + std::max<int64_t>(want, 1)) - 1;
    out.push_back({first, last, rule.causal ? first : std::min(first, rule.context_before),
                   last + 1 < frames ? rule.context_after : 0});
    first = last + 1;
  }
  return out;
}

namespace {

bool on_boundary(int64_t frame, const ChunkRule& rule) {
  if (frame == 0) return true;
  if (frame < rule.align_first) return false;
  return (frame - rule.align_first) % std::max<int64_t>(rule.align, 1) == 0;
}

std::string boundary_hint(int64_t frame, const ChunkRule& rule) {
  const int64_t a = std::max<int64_t>(rule.align, 1);
  int64_t below =
      frame < rule.align_first ? 0 : rule.align_first + (frame - rule.align_first) / a * a;
  const int64_t above = frame < rule.align_first ? rule.align_first : below + a;
  return "chunks start at frame 0, " + std::to_string(rule.align_first) + " + a multiple of " +
         std::to_string(a) + " (nearest: " + std::to_string(below) + " or " +
         std::to_string(above) + ")";
}

}  // namespace

ChunkRange range_chunk(int64_t first, int64_t last, int64_t frames, const ChunkRule& rule) {
  if (first < 0 || last < first) {
    throw Error(
        "--frames " + std::to_string(first) + "-" + std::to_string(last) + ": not a frame range",
        kExitDataErr);
  }
  if (frames > 0 && first >= frames) {
    throw Error("--frames " + std::to_string(first) + "-" + std::to_string(last) +
                    ": the input has only " + std::to_string(frames) + " frames",
                kExitDataErr);
  }
  if (frames > 0) last = std::min(last, frames - 1);
  if (!on_boundary(first, rule)) {
    throw Error("--frames: frame " + std::to_string(first) +
                    " is not a chunk boundary for this model: " + boundary_hint(first, rule),
                kExitDataErr);
  }
  const bool to_end = frames > 0 && last == frames - 1;
  if (!to_end && !on_boundary(last + 1, rule)) {
    throw Error("--frames: a chunk cannot end at frame " + std::to_string(last) +
                    " for this model: " + boundary_hint(last + 1, rule),
                kExitDataErr);
  }
  return {first, last, rule.causal ? first : std::min(first, rule.context_before),
          to_end ? 0 : rule.context_after};
}

std::pair<int64_t, int64_t> parse_frame_range(const std::string& text) {
  long long a = -1, b = -1;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lld-%lld%c", &a, &b, &tail) != 2 || a < 0 || b < a) {
    throw Error("--frames " + text + ": expected FIRST-LAST (inclusive, 0-based, FIRST <= LAST)",
                kExitUsage);
  }
  return {a, b};
}

std::optional<int64_t> chunk_from_environment() {
  for (const char* name : {"SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"}) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    const long long n = std::strtoll(value, &end, 10);
    if (*end != 0 || n < 0) {
      throw Error(std::string(name) + "=" + value + ": not a chunk index", kExitUsage);
    }
    return n;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Files, fingerprints, locks

namespace {

using Clock = std::chrono::steady_clock;

std::string farm_dir(const std::string& output) { return output + ".wmfarm"; }
std::string journal_path(const std::string& output) { return farm_dir(output) + "/journal.sqlite"; }

std::string extension_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

std::string segment_name(const ChunkRange& r, const std::string& ext) {
  char buf[64];
  if (r.last_frame < 0) {
    std::snprintf(buf, sizeof buf, "seg-%08" PRId64 "-end", r.first_frame);
  } else {
    std::snprintf(buf, sizeof buf, "seg-%08" PRId64 "-%08" PRId64, r.first_frame, r.last_frame);
  }
  return buf + ext;
}

// Tasks whose runner honours RunOptions' chunk fields (first/end/write_from frame).
bool chunked_task(Task task) {
  return task == Task::kUpscale || task == Task::kReconstruct || task == Task::kDecodeLatents ||
         task == Task::kEncodeLatents;
}

bool is_tensor_file(const std::string& path) { return extension_of(path) == ".safetensors"; }

// An input run in chunks: a video (or, for decode_latents, a latent file) to a video, or for
// encode_latents a video to a latent file (segments of latents: scheduler/latent_segments.h).
bool chunked_input(const JobSpec& job, const std::string& input, const std::string& output) {
  if (!chunked_task(job.task)) return false;
  if (job.task == Task::kEncodeLatents) return !is_tensor_file(input) && is_tensor_file(output);
  if (is_tensor_file(output)) return false;
  return job.task == Task::kDecodeLatents || !is_tensor_file(input);
}

// decode_latents: the frames `input`'s latents decode to (trimmed to its "frames" metadata, as
// the runner trims them), under the model's encode traits (make_latent_chunk_rule).
int64_t latent_output_frames(const JobSpec& job, const std::string& input,
                             const ModelTraits& encoder) {
  io::SafetensorsFile file(input);
  const std::vector<int64_t>& shape = file.info(job.input_tensor).shape;
  if (shape.size() != 4 && !(shape.size() == 5 && shape[0] == 1)) {
    throw InputError(input + ": tensor '" + job.input_tensor + "' must be [C,T,H,W] or [1,C,T,H,W]",
                     kExitDataErr);
  }
  const int64_t latents = shape[shape.size() - 3];
  int64_t frames = latents < 1 ? 0
                               : std::max(0, encoder.frame_offset) +
                                     std::max(1, encoder.frame_group) * (latents - 1);
  // As the decode_latents task reads it (task_latents.cpp): a bad value is exit 65 here too.
  if (const auto n = file.metadata_number("frames", 1, double(int64_t(1) << 40), true)) {
    frames = std::min<int64_t>(frames, int64_t(*n));
  }
  return frames;
}

// Chunked tasks of causal models whose runner carries the model state from chunk to chunk
// (RunOptions::carry: a session kept in memory, a state file saved after each chunk).
bool carries_state(Task task) {
  return task == Task::kReconstruct || task == Task::kDecodeLatents || task == Task::kEncodeLatents;
}

// The state saved after a chunk ending at `last_frame`, and its journal entry (a plan-cache row:
// the journal's schema stays): {"file", "size", "sequence"}.
std::string state_name(int64_t last_frame) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "state-%08" PRId64 ".safetensors", last_frame);
  return buf;
}
std::string state_key(int64_t last_frame) {
  return "causal-state after " + std::to_string(last_frame);
}

Fingerprint fingerprint(const JobSpec& job, const std::string& input) {
  const auto stamp = stamp_file(input);
  if (!stamp) throw InputError(input + ": " + std::strerror(errno), kExitNoInput);
  Fingerprint fp;
  fp.input = input;
  fp.size = stamp->size;
  fp.mtime_ns = stamp->mtime_ns;
  fp.settings = stable_hash(job_settings_text(job));
  return fp;
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log::get("farm")->warn("{}: cannot remove: {}", path, std::strerror(errno));
  }
}

// An exclusive flock on a lock file, waited for (cancel-aware). Released on destruction, or by
// the kernel when the process dies, so a killed holder never blocks the next run.
class FileLock {
 public:
  FileLock(const std::string& path, const std::string& what, const std::atomic<bool>* cancel) {
    fd_ = fs::open_lock_file(path);  // a symbolic link there is removed, never followed
    if (fd_ < 0) {
      throw OutputError(path + ": cannot create lock file: " + std::strerror(errno),
                        kExitCantCreat);
    }
    bool told = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) {
        const int err = errno;
        ::close(fd_);
        throw OutputError(path + ": cannot lock: " + std::strerror(err), kExitIoErr);
      }
      if (!told) {
        log::get("farm")->info("{}: another process is working on it; waiting", what);
        told = true;
      }
      if (cancel && cancel->load()) {
        ::close(fd_);
        throw Cancelled(what + ": interrupted while waiting for another process");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

enum class OutputState {
  kAbsent,
  kDone,       // assembled by us from the current input and settings, untouched since
  kOursStale,  // assembled by us from an older input or other settings
  kForeign,    // a file we did not make (or changed since)
};

// The output an assembly is about to rename into place, recorded (as a plan-cache entry, so the
// journal's schema stays) before the rename: a run killed after the rename but before its
// output row still finds the file to be its own.
const char* const kCommittingKey = "output-committing 1";

// Paths are bytes: json_dump/json_parse keep those that are not UTF-8.
void record_committing(Journal& journal, const OutputRecord& out) {
  const Fingerprint& fp = out.fingerprint;
  journal.put_plan(kCommittingKey, json_dump(nlohmann::json{{"input", fp.input},
                                                            {"input_size", fp.size},
                                                            {"input_mtime_ns", fp.mtime_ns},
                                                            {"settings", fp.settings},
                                                            {"frames", out.frames},
                                                            {"size", out.size},
                                                            {"mtime_ns", out.mtime_ns}}));
}

std::optional<OutputRecord> committing(Journal& journal) {
  try {
    const auto text = journal.plan(kCommittingKey);
    if (!text) return std::nullopt;
    const auto j = json_parse(*text);
    OutputRecord out;
    out.fingerprint.input = j.at("input").get<std::string>();
    out.fingerprint.size = j.at("input_size").get<int64_t>();
    out.fingerprint.mtime_ns = j.at("input_mtime_ns").get<int64_t>();
    out.fingerprint.settings = j.at("settings").get<std::string>();
    out.frames = j.at("frames").get<int64_t>();
    out.size = j.at("size").get<int64_t>();
    out.mtime_ns = j.at("mtime_ns").get<int64_t>();
    return out;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not ours to trust
  }
}

OutputState output_state(Journal* journal, const std::string& output, const Fingerprint& fp) {
  const auto stamp = stamp_file(output);
  if (!stamp) return OutputState::kAbsent;
  if (journal) {
    const auto same_file = [&](const OutputRecord& rec) {
      return rec.size == stamp->size && rec.mtime_ns == stamp->mtime_ns;
    };
    auto rec = journal->output();
    if (!rec || !same_file(*rec)) {
      // Renamed into place by a run that died before writing its output row: the file was
      // verified before the rename, so it is complete; finish that run's bookkeeping.
      if (auto pending = committing(*journal); pending && same_file(*pending)) {
        log::get("farm")->info("{}: recognised as the complete output of an interrupted assembly",
                               output);
        journal->put_output(*pending);
        rec = pending;
      }
    }
    if (rec && same_file(*rec)) {
      return rec->fingerprint == fp ? OutputState::kDone : OutputState::kOursStale;
    }
  }
  return OutputState::kForeign;
}

bool segment_intact(const std::string& dir, const ChunkRecord& rec) {
  const auto stamp = stamp_file(dir + "/" + rec.segment);
  return stamp && stamp->size == rec.segment_size && stamp->mtime_ns == rec.segment_mtime_ns;
}

// The plan of one input, cached in its journal under the fingerprint and chunk size.
struct InputPlan {
  bool whole = false;
  int64_t frames = 0;
  ChunkRule rule;
  std::vector<ChunkRange> ranges;
};

nlohmann::json to_json(const InputPlan& p) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const ChunkRange& r : p.ranges) {
    ranges.push_back({r.first_frame, r.last_frame, r.context_before, r.context_after});
  }
  return {{"frames", p.frames},
          {"rule",
           {p.rule.causal, p.rule.first_frames, p.rule.frames, p.rule.align_first, p.rule.align}},
          {"ranges", ranges}};
}

InputPlan input_plan_from_json(const nlohmann::json& j) {
  InputPlan p;
  p.frames = j.at("frames").get<int64_t>();
  const auto& r = j.at("rule");
  p.rule.causal = r.at(0).get<bool>();
  p.rule.first_frames = r.at(1).get<int64_t>();
  p.rule.frames = r.at(2).get<int64_t>();
  p.rule.align_first = r.at(3).get<int64_t>();
  p.rule.align = r.at(4).get<int64_t>();
  for (const auto& c : j.at("ranges")) {
    p.ranges.push_back({c.at(0).get<int64_t>(), c.at(1).get<int64_t>(), c.at(2).get<int64_t>(),
                        c.at(3).get<int64_t>()});
  }
  return p;
}

// Plans inputs, with two caches in each output's journal: the input's frame count (keyed by the
// input's path, size and mtime) and its chunks (keyed by the whole fingerprint and chunk size).
class Planner {
 public:
  // `traits` (optional): a cache of the models' traits kept by the caller across planners.
  Planner(int64_t chunk_frames, bool write_cache, bool need_ranges,
          std::map<size_t, ModelTraits>* traits = nullptr)
      : chunk_frames_(chunk_frames),
        write_cache_(write_cache),
        need_ranges_(need_ranges),
        traits_(traits ? *traits : own_traits_) {}

  InputPlan plan(const JobSpec& job, size_t job_index, const std::string& input,
                 const std::string& output) {
    InputPlan p;
    if (!chunked_input(job, input, output)) {
      p.whole = true;
      p.ranges.push_back({0, -1, 0, 0});
      return p;
    }
    const Fingerprint fp = fingerprint(job, input);
    // decode_latents: the output's frames, which depend on the model too.
    const bool latents = job.task == Task::kDecodeLatents;
    const std::string frames_key = latents
                                       ? "latent-frames 1 " + fp.str()
                                       : "frames 1 " + fp.input + " " + std::to_string(fp.size) +
                                             " " + std::to_string(fp.mtime_ns);
    const std::string plan_key =
        "plan 1 " + fp.str() + " chunk_frames " + std::to_string(chunk_frames_);
    std::unique_ptr<Journal> journal;
    const std::string jpath = journal_path(output);
    if (write_cache_) {
      fs::make_dirs(farm_dir(output));
      journal = std::make_unique<Journal>(jpath, true);
    } else if (stamp_file(jpath)) {
      journal = std::make_unique<Journal>(jpath, false);
    }
    std::optional<int64_t> frames;
    if (journal) {
      try {
        if (auto cached = journal->plan(plan_key)) {
          return input_plan_from_json(nlohmann::json::parse(*cached));
        }
        if (auto cached = journal->plan(frames_key)) frames = std::stoll(*cached);
      } catch (const std::exception&) {
        // A damaged cache entry: plan again.
      }
    }
    if (!frames) {
      frames = latents ? latent_output_frames(job, input, traits(job, job_index))
                       : io::count_video_frames(input);
      if (journal && write_cache_) journal->put_plan(frames_key, std::to_string(*frames));
    }
    p.frames = *frames;
    if (!need_ranges_) {
      p.ranges.push_back({0, p.frames > 0 ? p.frames - 1 : -1, 0, 0});
      return p;
    }
    // The slices the task runner will cut (temporal models: independent of the frame size).
    const ModelTraits& t = traits(job, job_index);
    p.rule = latents ? make_latent_chunk_rule(t, decode_slice_frames(job), chunk_frames_)
                     : make_chunk_rule(t, job_slice_rule(job, t, 0, 0), chunk_frames_);
    p.ranges = plan_chunks(p.frames, p.rule);
    if (journal && write_cache_) journal->put_plan(plan_key, to_json(p).dump());
    return p;
  }

 private:
  const ModelTraits& traits(const JobSpec& job, size_t job_index) {
    auto it = traits_.find(job_index);
    if (it == traits_.end()) {
      // Built on the CPU only to read its traits (the weights are checked on the way).
      // decode_latents reads the encoder's: its frame grouping maps latents to frames.
      ModelConfig config = job.model;
      if (job.task == Task::kDecodeLatents) config.task = "encode";
      std::unique_ptr<Model> model = make_model(config, Device{});
      it = traits_.emplace(job_index, model->traits()).first;
    }
    return it->second;
  }

  int64_t chunk_frames_;
  bool write_cache_;
  bool need_ranges_;
  std::map<size_t, ModelTraits> own_traits_;
  std::map<size_t, ModelTraits>& traits_;
};

struct PlannedInput {
  size_t job = 0;
  std::string input;
  std::string output;
  InputPlan plan;
  std::vector<size_t> chunks;  // indices into FarmPlan::chunks
};

// Appends the chunks of a planned input to the plan.
void add_chunks(FarmPlan& plan, PlannedInput& in) {
  const std::string ext = extension_of(in.output);
  for (const ChunkRange& r : in.plan.ranges) {
    Chunk c;
    c.index = int64_t(plan.chunks.size());
    c.job = in.job;
    c.input = in.input;
    c.output = in.output;
    c.input_frames = in.plan.frames;
    c.range = r;
    c.whole_input = in.plan.whole;
    if (!c.whole_input) c.segment = farm_dir(in.output) + "/" + segment_name(r, ext);
    in.chunks.push_back(plan.chunks.size());
    plan.chunks.push_back(c);
  }
}

FarmPlan build_plan(const std::string& job_file, int64_t chunk_frames, bool write_cache,
                    bool need_ranges, std::vector<PlannedInput>* inputs_out = nullptr) {
  FarmPlan plan;
  plan.job_file = job_file;
  plan.chunk_frames = chunk_frames > 0 ? chunk_frames : kDefaultChunkFrames;
  plan.jobs = load_job_file(job_file);
  preflight(plan.jobs);
  Planner planner(plan.chunk_frames, write_cache, need_ranges);
  std::vector<PlannedInput> inputs;
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const JobSpec& job = plan.jobs[j];
    if (job.output == kStdoutName) {
      throw ConfigError(job.file, job.output_line, "output",
                        "farm commands write files: standard output cannot be cut into chunks "
                        "(run the job with wmbatch " +
                            job.file + ")");
    }
    for (const std::string& input : expand_inputs(job)) {
      if (input == kStdinName) {
        throw ConfigError(job.file, job.line, "input",
                          "farm commands read files: standard input cannot be cut into chunks");
      }
      PlannedInput in;
      in.job = j;
      in.input = input;
      in.output = expand_output(job.output, input, job.name, job.dir);
      if (fs::same_file(input, in.output)) {
        throw Error(in.output + ": output would overwrite its input", kExitDataErr);
      }
      // Chunks are video segments joined by assembly: images are not split into chunks.
      if (io::image_path_kind(in.output) != io::ImagePath::kNone) {
        throw ConfigError(job.file, job.output_line, "output",
                          in.output +
                              ": image outputs are not run in farm chunks; run the job "
                              "with wmbatch " +
                              job.file);
      }
      in.plan = planner.plan(job, j, input, in.output);
      add_chunks(plan, in);
      inputs.push_back(std::move(in));
    }
  }
  if (inputs_out) *inputs_out = std::move(inputs);
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Running chunks

// Task runners of a job file, built on first use (models are loaded once per job).
class Runners {
 public:
  explicit Runners(const FarmPlan& plan) : plan_(plan) {}
  ChunkRunners& of(size_t job) {
    auto& slot = jobs_[job];
    if (!slot) slot = std::make_unique<ChunkRunners>(plan_.jobs[job]);
    return *slot;
  }

 private:
  const FarmPlan& plan_;
  std::map<size_t, std::unique_ptr<ChunkRunners>> jobs_;
};

std::string chunk_label(const Chunk& c) {
  // A range of `run --frames A-B` is no chunk of the plan.
  std::string s = c.index < 0 ? std::string("frames (") + c.output
                              : "chunk " + std::to_string(c.index) + " (" + c.output;
  if (c.whole_input) return s + ")";
  s += ", frames " + std::to_string(c.range.first_frame) + "-";
  s += c.range.last_frame < 0 ? std::string("end") : std::to_string(c.range.last_frame);
  return s + ")";
}

bool is_last_chunk(const Chunk& c) {
  return c.range.last_frame < 0 || (c.input_frames > 0 && c.range.last_frame >= c.input_frames - 1);
}

// Checks the output against on_exists before any work. Returns false when the chunk has nothing
// to do (output done, or skipped); throws for on_exists: fail.
bool output_needs_work(const JobSpec& job, Journal* journal, const std::string& output,
                       const Fingerprint& fp, const std::string& label) {
  auto log = log::get("farm");
  switch (output_state(journal, output, fp)) {
    case OutputState::kDone:
      log->info("{}: already done ({} is assembled)", label, output);
      return false;
    case OutputState::kForeign:
      if (job.on_exists == OnExists::kSkip) {
        log->info("{}: {} exists, skipped", label, output);
        return false;
      }
      if (job.on_exists == OnExists::kFail) {
        throw OutputError(output + ": output exists (set on_exists: overwrite or skip)",
                          kExitCantCreat);
      }
      return true;
    case OutputState::kOursStale:  // made by an earlier farm run from another input/settings
    case OutputState::kAbsent:
      return true;
  }
  return true;
}

// A causal state file recorded in the journal (carries_state tasks).
struct StateRecord {
  std::string file;  // in the farm folder; empty: none
  int64_t size = 0;
  std::string sequence;
};

std::optional<StateRecord> state_record(Journal& journal, int64_t last_frame) {
  try {
    const auto text = journal.plan(state_key(last_frame));
    if (!text || text->empty()) return std::nullopt;
    const auto j = json_parse(*text);
    StateRecord r{j.at("file").get<std::string>(), j.at("size").get<int64_t>(),
                  j.at("sequence").get<std::string>()};
    if (r.file.empty() || r.file.find('/') != std::string::npos) return std::nullopt;
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // not ours to trust: the prefix is recomputed
  }
}

// Records (or, with an empty file, forgets) the state after `last_frame`.
void put_state_record(Journal& journal, int64_t last_frame, const StateRecord& r) {
  journal.put_plan(state_key(last_frame),
                   r.file.empty()
                       ? std::string()
                       : json_dump(nlohmann::json{
                             {"file", r.file}, {"size", r.size}, {"sequence", r.sequence}}));
}

// The newest state recorded for `sequence` in `dir` that ends before frame `before`, and the
// last frame it follows; nullopt when none.
std::optional<std::pair<int64_t, StateRecord>> newest_state(Journal& journal,
                                                            const std::string& dir,
                                                            const std::string& sequence,
                                                            int64_t before) {
  std::vector<int64_t> lasts;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    long long last = -1;
    char tail = 0;
    const std::string name = e.path().filename();
    if (std::sscanf(name.c_str(), "state-%lld.safetensor%c", &last, &tail) == 2 && tail == 's' &&
        last >= 0 && last < before && name == state_name(last)) {
      lasts.push_back(last);
    }
  }
  std::sort(lasts.rbegin(), lasts.rend());
  for (int64_t last : lasts) {
    auto r = state_record(journal, last);
    if (r && r->sequence == sequence && r->file == state_name(last)) return std::pair{last, *r};
  }
  return std::nullopt;
}

// What saving causal states has cost against the chunks' own work, per sequence, in this
// process: a state is saved after a chunk only while saving stays within kStateBudget of the
// work (always after the first chunk this process runs of a sequence). At 1080p the official
// Wan2.1 VAE's state is ~15 GiB: saved after every 240-frame chunk it would cost a large part of
// the chunk's time; so it is saved every few chunks, and a resumed chunk runs the chunks since
// the newest state again (not written) before its own frames.
constexpr double kStateBudget = 0.1;
struct StateLedger {
  double work_seconds = 0, save_seconds = 0;
  int chunks = 0;
};
std::mutex g_ledger_mutex;
std::map<std::string, StateLedger> g_ledgers;

bool state_due(const std::string& sequence) {
  std::lock_guard<std::mutex> lock(g_ledger_mutex);
  const auto it = g_ledgers.find(sequence);
  return it == g_ledgers.end() || it->second.chunks == 0 ||
         it->second.save_seconds <= kStateBudget * it->second.work_seconds;
}

void account_state(const std::string& sequence, double chunk_seconds, double save_seconds,
                   bool last) {
  std::lock_guard<std::mutex> lock(g_ledger_mutex);
  if (last) {
    g_ledgers.erase(sequence);
    return;
  }
  StateLedger& l = g_ledgers[sequence];
  l.work_seconds += std::max(0.0, chunk_seconds - save_seconds);
  l.save_seconds += save_seconds;
  ++l.chunks;
}

// Removes the causal state files left in a farm folder (after assembly).
void remove_states(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("state-", 0) == 0) remove_file(e.path());
  }
}

// Runs one chunk to its segment (or a whole-input chunk to its output). Throws wm::Error.
void run_chunk(const FarmPlan& plan, const Chunk& c, const FarmOptions& options, Progress& progress,
               ChunkRunners& runners) {
  auto log = log::get("farm");
  const JobSpec& job = plan.jobs[c.job];
  const std::string label = chunk_label(c);
  const Fingerprint fp = fingerprint(job, c.input);
  const std::string dir = farm_dir(c.output);
  fs::make_dirs(dir);
  Journal journal(journal_path(c.output));
  if (!output_needs_work(job, &journal, c.output, fp, label)) return;

  char lock_name[96];
  std::snprintf(lock_name, sizeof lock_name, "/chunk-%" PRId64 "-%" PRId64 ".lock",
                c.range.first_frame, c.range.last_frame);
  FileLock lock(dir + lock_name, label, options.cancel);
  // Another process may have finished it while we waited.
  if (!output_needs_work(job, &journal, c.output, fp, label)) return;
  if (auto rec = journal.chunk(c.range.first_frame, c.range.last_frame)) {
    if (rec->fingerprint == fp && (c.whole_input || segment_intact(dir, *rec))) {
      log->info("{}: already done ({} frames)", label, rec->frames);
      if (options.on_chunk_done) options.on_chunk_done(c, rec->frames);
      return;
    }
  }
  // Whatever overlaps this range is stale now: another input, other settings, other chunking.
  const std::string own =
      c.whole_input ? std::string() : segment_name(c.range, extension_of(c.output));
  for (const ChunkRecord& stale :
       journal.remove_overlapping(c.range.first_frame, c.range.last_frame)) {
    if (!stale.segment.empty() && stale.segment != own) remove_file(dir + "/" + stale.segment);
    if (stale.fingerprint != fp) {
      log->info("{}: redoing: made from {}, now {}", label, stale.fingerprint.str(), fp.str());
    }
  }
  if (auto slice = journal.last_slice(c.range.first_frame, c.range.last_frame)) {
    log->info("{}: an earlier run stopped after {} frames; redoing the chunk", label,
              slice->frames_done);
  }
  journal.clear_slices(c.range.first_frame, c.range.last_frame);

  const auto start = Clock::now();
  RunOptions run;
  run.cancel = options.cancel;
  TaskRunner& runner = runners.get(c.whole_input);
  if (c.whole_input) {
    // Written straight to its output: the output's own lock too, as a plain run takes it.
    io::OutputLock output_lock(c.output, options.cancel);
    if (!output_needs_work(job, &journal, c.output, fp, label)) return;
    fs::remove_stale_temps(c.output);
    if (options.on_chunk_start) options.on_chunk_start(c);
    int64_t frames = 0;
    try {
      frames = runner.process(c.input, c.output, run, progress);
    } catch (const Cancelled&) {
      throw Cancelled(label + ": interrupted; nothing was written");
    }
    const auto stamp = stamp_file(c.output);
    ChunkRecord rec;
    rec.first_frame = 0;
    rec.last_frame = -1;
    rec.fingerprint = fp;
    rec.frames = frames;
    rec.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rec.host = host_name();
    journal.put_chunk(rec);
    OutputRecord out;
    out.fingerprint = fp;
    out.frames = frames;
    out.size = stamp ? stamp->size : 0;
    out.mtime_ns = stamp ? stamp->mtime_ns : 0;
    journal.put_output(out);
    log->info("{}: done, {} frames in {:.1f} s", label, frames, rec.seconds);
    if (options.on_chunk_done) options.on_chunk_done(c, frames);
    return;
  }

  fs::remove_stale_temps(c.segment);  // left by killed runs (we hold the chunk's lock)
  const bool last = is_last_chunk(c);
  run.segment = true;
  run.first_frame = c.range.first_frame - c.range.context_before;
  run.write_from_frame = c.range.first_frame;
  // The last chunk reads to the end of the stream, whatever the frame count said.
  run.end_frame = last ? -1 : c.range.last_frame + 1 + c.range.context_after;
  run.write_to_frame = last ? -1 : c.range.last_frame + 1;
  const int64_t first = c.range.first_frame, last_frame = c.range.last_frame;
  int64_t frames_done = 0;
  run.on_slice = [&journal, &frames_done, &options, first, last_frame](int64_t slice,
                                                                       int64_t written) {
    frames_done = written;
    journal.put_slice({first, last_frame, slice, written});
    if (options.on_slice) options.on_slice(written);
  };
  // A causal model's state: from the chunk before (kept by the runner, or saved), and saved for
  // the chunk after.
  CausalCarry carry;
  std::optional<std::pair<int64_t, StateRecord>> resume;
  if (carries_state(job.task)) {
    carry.sequence = fp.str();
    if (c.range.first_frame > 0) {
      resume = newest_state(journal, dir, carry.sequence, c.range.first_frame);
      if (resume) {
        carry.resume_from = dir + "/" + resume->second.file;
        carry.resume_size = resume->second.size;
        carry.resume_next = resume->first + 1;
      }
    }
    if (!last && state_due(carry.sequence)) {
      carry.save_to = dir + "/" + state_name(c.range.last_frame);
    }
    run.carry = &carry;
  }
  if (options.on_chunk_start) options.on_chunk_start(c);
  int64_t written = 0;
  try {
    written = runner.process(c.input, c.segment, run, progress);
  } catch (const Cancelled&) {
    throw Cancelled(label + ": interrupted after " + std::to_string(frames_done) +
                    " frames; the segment was not kept");
  }

  const io::SegmentInfo info = is_tensor_file(c.segment)
                                   ? probe_latent_segment(c.segment, c.range.first_frame)
                                   : io::probe_segment(c.segment);
  const int64_t expected = c.range.last_frame - c.range.first_frame + 1;
  if (info.frames != written || (!last && written != expected) || written <= 0) {
    remove_file(c.segment);
    throw Error(c.segment + ": segment holds " + std::to_string(info.frames) + " frames, " +
                    std::to_string(written) + " written, " + std::to_string(expected) +
                    " expected (does task " + to_string(job.task) + " support farm chunks?)",
                kExitSoftware);
  }
  const auto stamp = stamp_file(c.segment);
  if (!stamp) throw OutputError(c.segment + ": vanished after it was written", kExitIoErr);
  ChunkRecord rec;
  rec.first_frame = c.range.first_frame;
  rec.last_frame = c.range.last_frame;
  rec.fingerprint = fp;
  rec.segment = own;
  rec.frames = written;
  rec.first_pts = info.first_pts;
  rec.last_pts = info.last_pts;
  rec.segment_size = stamp->size;
  rec.segment_mtime_ns = stamp->mtime_ns;
  rec.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rec.host = host_name();
  if (carry.saved_bytes > 0) {
    // Before the chunk's row: a finished chunk is never without its recorded state.
    put_state_record(journal, c.range.last_frame,
                     {state_name(c.range.last_frame), carry.saved_bytes, carry.sequence});
  }
  journal.put_chunk(rec);  // after the segment's rename: the journal never lists a partial file
  if (run.carry) {
    const char* how = carry.resumed == "session" ? "continued the model state in memory"
                      : carry.resumed == "state" ? "started from the saved model state"
                      : c.range.first_frame == 0 ? "started at the sequence's start"
                                                 : "rebuilt the model state from frame 0";
    log->info("{}: {}{}", label, how,
              carry.saved_bytes > 0
                  ? "; saved its state (" + std::to_string(carry.saved_bytes) + " bytes)"
                  : std::string());
  }
  if (run.carry) account_state(carry.sequence, rec.seconds, carry.save_seconds, last);
  if (resume && (carry.saved_bytes > 0 || last)) {
    // Later chunks start from this chunk's state now (or there are none): the one before it
    // has served.
    remove_file(dir + "/" + resume->second.file);
    put_state_record(journal, resume->first, {});
  }
  log->info("{}: done, {} frames in {:.1f} s", label, written, rec.seconds);
  if (options.on_chunk_done) options.on_chunk_done(c, written);
}

// ---------------------------------------------------------------------------------------------
// Assembling

// The frames of a chain of chunks.
int64_t chain_frames(const std::vector<ChunkRecord>& chain) {
  int64_t frames = 0;
  for (const ChunkRecord& rec : chain) frames += rec.frames;
  return frames;
}

// Assembles one output from the segments its journal lists. Throws wm::Error.
void assemble_output(const FarmPlan& plan, const PlannedInput& in, const FarmOptions& options) {
  auto log = log::get("farm");
  const JobSpec& job = plan.jobs[in.job];
  const Fingerprint fp = fingerprint(job, in.input);
  const std::string dir = farm_dir(in.output);
  const std::string jpath = journal_path(in.output);
  const std::string label = "assemble " + in.output;
  if (!stamp_file(jpath)) {
    Journal* none = nullptr;
    if (!output_needs_work(job, none, in.output, fp, label)) return;
    throw Error(in.output + ": no chunk is done yet (run the chunks first: wmbatch run " +
                    plan.job_file + " --chunk N)",
                kExitFailure);
  }
  Journal journal(jpath, false);
  if (in.plan.whole) {
    auto rec = journal.chunk(0, -1);
    if (rec && rec->fingerprint == fp &&
        output_state(&journal, in.output, fp) == OutputState::kDone) {
      log->info("{}: done (written by its chunk)", label);
      return;
    }
    throw Error(in.output + ": chunk " + std::to_string(plan.chunks[in.chunks.front()].index) +
                    " is not done",
                kExitFailure);
  }
  if (!output_needs_work(job, &journal, in.output, fp, label)) return;
  FileLock lock(dir + "/assemble.lock", label, options.cancel);
  // And the output's own lock, which a plain run of a job with this output takes too.
  io::OutputLock output_lock(in.output, options.cancel);
  if (!output_needs_work(job, &journal, in.output, fp, label)) return;
  fs::remove_stale_temps(in.output);

  // The segments, chained from frame 0 to the end of the input.
  std::map<int64_t, ChunkRecord> by_first;
  for (ChunkRecord& rec : journal.chunks()) {
    if (rec.fingerprint == fp) by_first[rec.first_frame] = std::move(rec);
  }
  std::vector<ChunkRecord> chain;
  std::vector<std::string> missing;
  const int64_t frames = in.plan.frames;
  int64_t next = 0;
  while (frames <= 0 ? chain.empty() : next < frames) {
    auto it = by_first.find(next);
    if (it == by_first.end()) {
      auto after = by_first.upper_bound(next);
      const int64_t until = after == by_first.end() ? frames - 1 : after->first - 1;
      missing.push_back(std::to_string(next) + "-" + std::to_string(until));
      if (after == by_first.end()) break;
      next = after->first;
      continue;
    }
    chain.push_back(it->second);
    if (it->second.last_frame < 0) break;
    next = it->second.last_frame + 1;
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw Error(in.output + ": frames " + list + " are not done yet (run their chunks, then " +
                    "assemble again)",
                kExitFailure);
  }
  // Every segment must be the file the journal recorded, whole, and continue the previous one.
  std::vector<std::string> paths;
  int64_t prev_last_pts = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    const ChunkRecord& rec = chain[i];
    const std::string path = dir + "/" + rec.segment;
    std::string problem;
    io::SegmentInfo info;
    if (!segment_intact(dir, rec)) {
      problem = "missing or changed since its chunk finished";
    } else {
      try {
        info = is_tensor_file(path) ? probe_latent_segment(path, rec.first_frame)
                                    : io::probe_segment(path);
      } catch (const Error& e) {
        problem = e.what();
      }
      if (problem.empty() && info.frames != rec.frames) {
        problem = "holds " + std::to_string(info.frames) + " frames, " +
                  std::to_string(rec.frames) + " recorded";
      } else if (problem.empty() &&
                 (info.first_pts != rec.first_pts || info.last_pts != rec.last_pts)) {
        problem = "pts differ from the recorded ones";
      } else if (problem.empty() && i > 0 && info.first_pts <= prev_last_pts) {
        problem = "pts " + std::to_string(info.first_pts) + " does not follow the previous " +
                  "segment's " + std::to_string(prev_last_pts);
      }
    }
    if (!problem.empty()) {
      // Forget it, so rerunning its chunk redoes it.
      journal.remove_overlapping(rec.first_frame, rec.last_frame);
      throw Error(path + ": " + problem + "; rerun its chunk (frames " +
                      std::to_string(rec.first_frame) + "-" + std::to_string(rec.last_frame) +
                      ") and assemble again",
                  kExitFailure);
    }
    prev_last_pts = info.last_pts;
    paths.push_back(path);
  }

  io::ConcatConfig concat;
  concat.segments = paths;
  concat.output = in.output;
  // A latent file carries no streams to copy.
  concat.source_path = job.task == Task::kDecodeLatents ? std::string() : in.input;
  concat.copy_audio = job.encode.copy_audio;
  concat.copy_subtitles = job.encode.copy_subtitles;
  concat.cancel = options.cancel;
  concat.before_rename = [&](const std::string& temp_path) {
    const auto stamp = stamp_file(temp_path);  // a rename keeps size and mtime
    if (!stamp) throw OutputError(temp_path + ": vanished before its rename", kExitIoErr);
    OutputRecord out;
    out.fingerprint = fp;
    out.frames = 0;
    for (const ChunkRecord& rec : chain) out.frames += rec.frames;
    out.size = stamp->size;
    out.mtime_ns = stamp->mtime_ns;
    record_committing(journal, out);
  };
  const auto start = Clock::now();
  // encode_latents: latent segments, concatenated along T into the file a whole run writes.
  const int64_t written =
      is_tensor_file(in.output)
          ? (concat_latent_segments(paths, in.output, concat.before_rename), chain_frames(chain))
          : io::concat_segments(concat);
  const auto stamp = stamp_file(in.output);
  if (!stamp) throw OutputError(in.output + ": vanished after it was written", kExitIoErr);
  OutputRecord out;
  out.fingerprint = fp;
  out.frames = written;
  out.size = stamp->size;
  out.mtime_ns = stamp->mtime_ns;
  journal.put_output(out);
  log->info("{}: {} frames from {} segments in {:.1f} s", label, written, chain.size(),
            std::chrono::duration<double>(Clock::now() - start).count());
  if (!options.keep_segments) {
    for (const std::string& path : paths) remove_file(path);
    remove_states(dir);
  }
}

int report(const Error& e) {
  auto log = log::get("farm");
  if (e.exit_code() == kExitTempFail) {
    log->warn("{} (exit 75: rerun to resume)", e.what());
  } else {
    log->error("{}", e.what());
  }
  return e.exit_code();
}

template <typename F>
int guarded(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    return report(e);
  } catch (const std::exception& e) {
    log::get("farm")->error("internal error: {}", e.what());
    return kExitSoftware;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points

FarmPlan plan_farm(const std::string& job_file, const FarmOptions& options) {
  return build_plan(job_file, options.chunk_frames, /*write_cache=*/false, /*need_ranges=*/true);
}

std::string plan_json(const FarmPlan& plan) {
  nlohmann::json chunks = nlohmann::json::array();
  for (const Chunk& c : plan.chunks) {
    nlohmann::json j = {
        {"index", c.index},
        {"job", plan.jobs[c.job].name},
        {"input", c.input},
        {"output", c.output},
        {"input_frames", c.input_frames},
        {"first_frame", c.range.first_frame},
        {"last_frame", c.range.last_frame},
        {"frames",
         c.range.last_frame < 0 ? int64_t(0) : c.range.last_frame - c.range.first_frame + 1},
        {"context_before", c.range.context_before},
        {"context_after", c.range.context_after},
        {"whole_input", c.whole_input}};
    if (!c.whole_input) j["segment"] = c.segment;
    chunks.push_back(j);
  }
  nlohmann::json out = {
      {"job_file", plan.job_file}, {"chunk_frames", plan.chunk_frames}, {"chunks", chunks}};
  return json_dump(out, 2);  // paths are bytes: those not UTF-8 as \udcXX
}

namespace {

// The chunk size earlier runs of this job file planned with (`plan 1 <fingerprint> chunk_frames
// N` in its outputs' journals), for a `run` given no --chunk-frames: every farm task of a plan
// must cut the same chunks. 0 when no journal says; Error (64) when journals disagree.
int64_t journal_chunk_frames(const std::string& job_file) {
  std::set<int64_t> found;
  std::string where;
  for (const JobSpec& job : load_job_file(job_file)) {
    std::vector<std::string> inputs;
    try {
      inputs = expand_inputs(job);
    } catch (const Error&) {
      continue;  // reported by the plan
    }
    for (const std::string& input : inputs) {
      std::string output;
      try {
        output = expand_output(job.output, input, job.name, job.dir);
      } catch (const Error&) {
        continue;
      }
      if (!stamp_file(journal_path(output))) continue;
      Journal journal(journal_path(output), false);
      const std::string prefix = "plan 1 " + fingerprint(job, input).str() + " chunk_frames ";
      for (const std::string& key : journal.plan_keys(prefix)) {
        try {
          found.insert(std::stoll(key.substr(prefix.size())));
          where = journal.path();
        } catch (const std::exception&) {
          // not a number: not ours
        }
      }
    }
  }
  if (found.size() > 1) {
    std::string sizes;
    for (int64_t n : found) sizes += (sizes.empty() ? "" : " and ") + std::to_string(n);
    throw Error(job_file + ": earlier runs planned chunks of " + sizes +
                    " frames; give --chunk-frames (the value `plan` was given)",
                kExitUsage);
  }
  if (found.empty()) return 0;
  log::get("farm")->info("--chunk-frames {} (as the earlier runs of this plan: {})", *found.begin(),
                         where);
  return *found.begin();
}

// Once every output of the job file is assembled, their farm folders (journals, locks) have
// served: removed unless kept. Not before: an `assemble` that failed for one output and is run
// again must find the others' journals, which say they are done.
void remove_farm_dirs(const std::vector<PlannedInput>& inputs, const FarmOptions& options) {
  if (options.keep_journal || options.keep_segments) return;
  for (const PlannedInput& in : inputs) {
    const std::string dir = farm_dir(in.output);
    if (!stamp_file(dir)) continue;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) log::get("farm")->warn("{}: cannot remove: {}", dir, ec.message());
  }
}

}  // namespace

int run_farm(const std::string& job_file, const ChunkSelection& selection,
             const FarmOptions& given) {
  return guarded([&]() -> int {
    FarmOptions options = given;
    const bool chunk_frames_given = options.chunk_frames > 0;
    if (!chunk_frames_given) options.chunk_frames = journal_chunk_frames(job_file);
    std::vector<PlannedInput> inputs;
    const FarmPlan plan = build_plan(job_file, options.chunk_frames, /*write_cache=*/true,
                                     /*need_ranges=*/true, &inputs);
    // Farm managers (Deadline) parse "Progress: N%" from stdout.
    Progress progress(options.progress, options.progress == ProgressStyle::kFarm ? stdout : stderr);
    Runners runners(plan);
    if (selection.frames) {
      if (inputs.size() != 1) {
        throw Error(job_file + ": --frames needs a job file with exactly one input (it has " +
                        std::to_string(inputs.size()) + "); use --chunk N",
                    kExitUsage);
      }
      const PlannedInput& in = inputs.front();
      if (in.plan.whole) {
        throw Error(job_file + ": task " + std::string(to_string(plan.jobs[in.job].task)) +
                        " runs each input as one chunk; use --chunk N",
                    kExitDataErr);
      }
      Chunk c = plan.chunks[in.chunks.front()];
      c.index = -1;
      c.range = range_chunk(selection.frames->first, selection.frames->second, in.plan.frames,
                            in.plan.rule);
      c.segment = farm_dir(c.output) + "/" + segment_name(c.range, extension_of(c.output));
      run_chunk(plan, c, options, progress, runners.of(c.job));
      return kExitOk;
    }
    if (selection.chunk) {
      const int64_t n = *selection.chunk;
      const std::string frames_said = chunk_frames_given         ? std::string()
                                      : options.chunk_frames > 0 ? " (as the journal says)"
                                                                 : " (the default)";
      if (n < 0 || n >= int64_t(plan.chunks.size())) {
        throw Error(job_file + ": chunk " + std::to_string(n) + " does not exist (the plan has " +
                        std::to_string(plan.chunks.size()) + " chunks: 0-" +
                        std::to_string(int64_t(plan.chunks.size()) - 1) + ", with --chunk-frames " +
                        std::to_string(plan.chunk_frames) + frames_said +
                        "; run takes the --chunk-frames that plan was given)",
                    kExitDataErr);
      }
      if (!chunk_frames_given && options.chunk_frames == 0) {
        log::get("farm")->info(
            "chunk {} of {}, planned with --chunk-frames {} (the default; give run the "
            "--chunk-frames that plan was given if it differed)",
            n, plan.chunks.size(), plan.chunk_frames);
      }
      run_chunk(plan, plan.chunks[size_t(n)], options, progress,
                runners.of(plan.chunks[size_t(n)].job));
      return kExitOk;
    }
    // Everything, in order, then assemble: the single-process run of a farm job.
    int rc = kExitOk;
    for (const PlannedInput& in : inputs) {
      int input_rc = kExitOk;
      for (size_t index : in.chunks) {
        try {
          run_chunk(plan, plan.chunks[index], options, progress,
                    runners.of(plan.chunks[index].job));
        } catch (const Error& e) {
          if (e.exit_code() == kExitTempFail) throw;
          input_rc = report(e);
          break;
        }
      }
      if (input_rc == kExitOk) {
        try {
          assemble_output(plan, in, options);
        } catch (const Error& e) {
          if (e.exit_code() == kExitTempFail) throw;
          input_rc = report(e);
        }
      }
      if (rc == kExitOk) rc = input_rc;
    }
    if (rc == kExitOk) remove_farm_dirs(inputs, options);
    return rc;
  });
}

int assemble_farm(const std::string& job_file, const FarmOptions& options) {
  return guarded([&]() -> int {
    std::vector<PlannedInput> inputs;
    const FarmPlan plan = build_plan(job_file, options.chunk_frames, /*write_cache=*/false,
                                     /*need_ranges=*/false, &inputs);
    int rc = kExitOk;
    for (const PlannedInput& in : inputs) {
      try {
        assemble_output(plan, in, options);
      } catch (const Error& e) {
        if (e.exit_code() == kExitTempFail) throw;
        const int code = report(e);
        if (rc == kExitOk) rc = code;
      }
    }
    if (rc == kExitOk) remove_farm_dirs(inputs, options);
    return rc;
  });
}

std::string job_settings_hash(const JobSpec& job) { return stable_hash(job_settings_text(job)); }

ChunkRunners::ChunkRunners(JobSpec job) : job_(std::move(job)) {}
ChunkRunners::~ChunkRunners() = default;

TaskRunner& ChunkRunners::get(bool whole) {
  auto& slot = whole ? whole_ : segment_;
  if (!slot) {
    JobSpec spec = job_;
    if (!whole) {
      // Segments hold video only; assemble muxes audio and subtitles once from the source.
      spec.encode.copy_audio = false;
      spec.encode.copy_subtitles = false;
    }
    slot = make_task_runner(spec);
  }
  return *slot;
}

std::string chunk_work_folder(const std::string& output) { return farm_dir(output); }

namespace {

// Model traits by job settings, shared by every ChunkRunners of the process (the watch daemon's
// workers): planning builds a model on the CPU to read them, once per process and job.
std::mutex g_traits_mutex;
std::map<std::string, ModelTraits> g_traits;

}  // namespace

InputChunksResult run_input_chunks(ChunkRunners& runners, const std::string& input,
                                   const std::string& output, const FarmOptions& options,
                                   Progress& progress) {
  FarmPlan plan;
  plan.job_file = input;
  plan.chunk_frames = options.chunk_frames > 0 ? options.chunk_frames : kDefaultChunkFrames;
  plan.jobs = {runners.job()};
  if (fs::same_file(input, output)) {
    throw Error(output + ": output would overwrite its input", kExitDataErr);
  }
  const std::string traits_key = job_settings_text(runners.job());
  if (runners.traits().empty()) {
    std::lock_guard<std::mutex> lock(g_traits_mutex);
    if (auto it = g_traits.find(traits_key); it != g_traits.end()) {
      runners.traits().emplace(0, it->second);
    }
  }
  PlannedInput in;
  in.input = input;
  in.output = output;
  // Planned without writing first: an input of one chunk needs no work folder. Tensor files
  // (upscale's .safetensors path) hold no video stream to cut; decode_latents' latents do.
  if (!chunked_input(runners.job(), input, output)) {
    in.plan.whole = true;
  } else {
    in.plan =
        Planner(plan.chunk_frames, /*write_cache=*/false, /*need_ranges=*/true, &runners.traits())
            .plan(plan.jobs.front(), 0, input, output);
  }
  if (auto it = runners.traits().find(0); it != runners.traits().end()) {
    std::lock_guard<std::mutex> lock(g_traits_mutex);
    g_traits.emplace(traits_key, it->second);
  }
  const bool one_chunk = in.plan.whole ||
                         (in.plan.rule.causal && !carries_state(plan.jobs.front().task)) ||
                         in.plan.ranges.size() <= 1;
  InputChunksResult result;
  result.whole = one_chunk;
  result.chunks = one_chunk ? 1 : int64_t(in.plan.ranges.size());
  const std::string dir = farm_dir(output);
  if (one_chunk) {
    // Nothing to resume within it: the plain run's way, straight to `output`. (A chunk of a
    // causal model decodes and runs every frame before it: chunking would multiply the work.)
    RunOptions run;
    run.cancel = options.cancel;
    run.on_slice = [&options](int64_t, int64_t written) {
      if (options.on_slice) options.on_slice(written);
    };
    fs::remove_stale_temps(output);
    result.frames = runners.get(/*whole=*/true).process(input, output, run, progress);
  } else {
    in.plan =
        Planner(plan.chunk_frames, /*write_cache=*/true, /*need_ranges=*/true, &runners.traits())
            .plan(plan.jobs.front(), 0, input, output);
    add_chunks(plan, in);
    for (size_t index : in.chunks) {
      run_chunk(plan, plan.chunks[index], options, progress, runners);
    }
    assemble_output(plan, in, options);
    Journal journal(journal_path(output), false);
    if (auto out = journal.output()) result.frames = out->frames;
  }
  if (!options.keep_segments && stamp_file(dir)) {
    // The output is complete and in place: the journal, locks and segments have served.
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) log::get("farm")->warn("{}: cannot remove: {}", dir, ec.message());
  }
  return result;
}

}  // namespace wm::sched
