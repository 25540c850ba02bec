#include "scheduler/farm_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "io/image_output.h"
#include "io/segments.h"
#include "scheduler/farm_journal.h"
#include "scheduler/journal.h"
#include "scheduler/preflight.h"
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

FarmPlan plan_farm(const std::string& job_file, const FarmOptions& options) {
  return farm::build_plan(job_file, options.chunk_frames, /*record=*/false,
                          /*need_ranges=*/true);
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

namespace farm {

namespace {

// Tasks whose runner honours RunOptions' chunk fields (first/end/write_from frame).
bool chunked_task(Task task) {
  return task == Task::kUpscale || task == Task::kReconstruct || task == Task::kDecodeLatents ||
         task == Task::kEncodeLatents;
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

}  // namespace

bool chunked_input(const JobSpec& job, const std::string& input, const std::string& output) {
  if (!chunked_task(job.task)) return false;
  if (job.task == Task::kEncodeLatents) return !is_tensor_file(input) && is_tensor_file(output);
  if (is_tensor_file(output)) return false;
  return job.task == Task::kDecodeLatents || !is_tensor_file(input);
}

bool carries_state(Task task) {
  return task == Task::kReconstruct || task == Task::kDecodeLatents || task == Task::kEncodeLatents;
}

const ModelTraits& TraitsCache::of(const JobSpec& job, size_t job_index) {
  auto it = traits_.find(job_index);
  if (it == traits_.end()) {
    ModelConfig config = job.model;
    if (job.task == Task::kDecodeLatents) config.task = "encode";
    std::unique_ptr<Model> model = make_model(config, Device{});
    it = traits_.emplace(job_index, model->traits()).first;
  }
  return it->second;
}

InputPlan Planner::plan(const JobSpec& job, size_t job_index, const std::string& input,
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
  const std::string frames_key = latents ? "latent-frames 1 " + fp.str()
                                         : "frames 1 " + fp.input + " " + std::to_string(fp.size) +
                                               " " + std::to_string(fp.mtime_ns);
  const std::string plan_key =
      "plan 1 " + fp.str() + " chunk_frames " + std::to_string(chunk_frames_);
  std::unique_ptr<Journal> journal;
  const std::string jpath = journal_path(output);
  if (stamp_file(jpath)) journal = std::make_unique<Journal>(jpath, false);
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
    frames = latents ? latent_output_frames(job, input, traits_.of(job, job_index))
                     : io::count_video_frames(input);
    p.frames_key = frames_key;
  }
  p.frames = *frames;
  if (!need_ranges_) {
    p.ranges.push_back({0, p.frames > 0 ? p.frames - 1 : -1, 0, 0});
    return p;
  }
  // The slices the task runner will cut (temporal models: independent of the frame size).
  const ModelTraits& t = traits_.of(job, job_index);
  p.rule = latents ? make_latent_chunk_rule(t, decode_slice_frames(job), chunk_frames_)
                   : make_chunk_rule(t, job_slice_rule(job, t, 0, 0), chunk_frames_);
  p.ranges = plan_chunks(p.frames, p.rule);
  p.plan_key = plan_key;
  return p;
}

void Planner::record(const std::string& output, const InputPlan& p) {
  if (p.whole || (p.frames_key.empty() && p.plan_key.empty())) return;
  fs::make_dirs(farm_dir(output));
  Journal journal(journal_path(output), true);
  if (!p.frames_key.empty()) journal.put_plan(p.frames_key, std::to_string(p.frames));
  if (!p.plan_key.empty()) journal.put_plan(p.plan_key, to_json(p).dump());
}

void add_chunks(std::vector<Chunk>& chunks, PlannedInput& in) {
  const std::string ext = extension_of(in.output);
  for (const ChunkRange& r : in.plan.ranges) {
    Chunk c;
    c.index = int64_t(chunks.size());
    c.job = in.job;
    c.input = in.input;
    c.output = in.output;
    c.input_frames = in.plan.frames;
    c.range = r;
    c.whole_input = in.plan.whole;
    if (!c.whole_input) c.segment = farm_dir(in.output) + "/" + segment_name(r, ext);
    in.chunks.push_back(chunks.size());
    chunks.push_back(c);
  }
}

FarmPlan build_plan(const std::string& job_file, int64_t chunk_frames, bool record,
                    bool need_ranges, std::vector<PlannedInput>* inputs_out) {
  FarmPlan plan;
  plan.job_file = job_file;
  plan.chunk_frames = chunk_frames > 0 ? chunk_frames : kDefaultChunkFrames;
  plan.jobs = load_job_file(job_file);
  preflight(plan.jobs);
  TraitsCache traits;
  Planner planner(plan.chunk_frames, need_ranges, traits);
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
      if (record) planner.record(in.output, in.plan);
      add_chunks(plan.chunks, in);
      inputs.push_back(std::move(in));
    }
  }
  if (inputs_out) *inputs_out = std::move(inputs);
  return plan;
}

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

}  // namespace farm
}  // namespace wm::sched
