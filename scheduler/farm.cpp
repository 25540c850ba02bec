// The farm's commands (scheduler/farm.h): `run` and `assemble` of a job file, through the stages
// of scheduler/farm_plan.h, farm_run.h and farm_assemble.h.
#include "scheduler/farm.h"

#include <map>
#include <memory>
#include <vector>

#include "scheduler/farm_assemble.h"
#include "scheduler/farm_journal.h"
#include "scheduler/farm_plan.h"
#include "scheduler/farm_run.h"
#include "scheduler/fingerprint.h"
#include "scheduler/progress.h"
#include "src/base/error.h"
#include "src/base/log.h"

namespace wm::sched {

using farm::PlannedInput;

namespace {

// The task runners of a job file, built on first use (models are loaded once per job).
class Runners {
 public:
  explicit Runners(const FarmPlan& plan) : plan_(plan) {}
  farm::JobRunners& of(size_t job) {
    auto& slot = jobs_[job];
    if (!slot) slot = std::make_unique<farm::JobRunners>(plan_.jobs[job]);
    return *slot;
  }

 private:
  const FarmPlan& plan_;
  std::map<size_t, std::unique_ptr<farm::JobRunners>> jobs_;
};

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

// Once every output of the job file is assembled, their farm folders (journals, locks) have
// served: removed unless kept. Not before: an `assemble` that failed for one output and is run
// again must find the others' journals, which say they are done.
void remove_farm_dirs(const std::vector<PlannedInput>& inputs, const FarmOptions& options) {
  if (options.keep_journal || options.keep_segments) return;
  for (const PlannedInput& in : inputs) farm::remove_farm_dir(in.output);
}

}  // namespace

int run_farm(const std::string& job_file, const ChunkSelection& selection,
             const FarmOptions& given) {
  return guarded([&]() -> int {
    FarmOptions options = given;
    const bool chunk_frames_given = options.chunk_frames > 0;
    if (!chunk_frames_given) options.chunk_frames = farm::journal_chunk_frames(job_file);
    std::vector<PlannedInput> inputs;
    const FarmPlan plan = farm::build_plan(job_file, options.chunk_frames, /*record=*/true,
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
      c.segment = farm::farm_dir(c.output) + "/" +
                  farm::segment_name(c.range, farm::extension_of(c.output));
      farm::run_chunk(c, options, {}, progress, runners.of(c.job));
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
      farm::run_chunk(plan.chunks[size_t(n)], options, {}, progress,
                      runners.of(plan.chunks[size_t(n)].job));
      return kExitOk;
    }
    // Everything, in order, then assemble: the single-process run of a farm job.
    int rc = kExitOk;
    for (const PlannedInput& in : inputs) {
      int input_rc = kExitOk;
      for (size_t index : in.chunks) {
        try {
          farm::run_chunk(plan.chunks[index], options, {}, progress,
                          runners.of(plan.chunks[index].job));
        } catch (const Error& e) {
          if (e.exit_code() == kExitTempFail) throw;
          input_rc = report(e);
          break;
        }
      }
      if (input_rc == kExitOk) {
        try {
          farm::assemble_output(plan.jobs[in.job], in, plan.job_file, options);
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
    const FarmPlan plan = farm::build_plan(job_file, options.chunk_frames, /*record=*/false,
                                           /*need_ranges=*/false, &inputs);
    int rc = kExitOk;
    for (const PlannedInput& in : inputs) {
      try {
        farm::assemble_output(plan.jobs[in.job], in, plan.job_file, options);
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

}  // namespace wm::sched
