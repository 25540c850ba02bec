#include "scheduler/farm_assemble.h"

#include <chrono>
#include <map>
#include <vector>

#include "io/output_file.h"
#include "io/segments.h"
#include "scheduler/farm_journal.h"
#include "scheduler/journal.h"
#include "scheduler/latent_segments.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::sched::farm {

namespace {

using Clock = std::chrono::steady_clock;

// The frames of a chain of chunks.
int64_t chain_frames(const std::vector<ChunkRecord>& chain) {
  int64_t frames = 0;
  for (const ChunkRecord& rec : chain) frames += rec.frames;
  return frames;
}

}  // namespace

void assemble_output(const JobSpec& job, const PlannedInput& in, const std::string& job_file,
                     const FarmOptions& options) {
  auto log = log::get("farm");
  const Fingerprint fp = fingerprint(job, in.input);
  const std::string dir = farm_dir(in.output);
  const std::string jpath = journal_path(in.output);
  const std::string label = "assemble " + in.output;
  if (!stamp_file(jpath)) {
    Journal* none = nullptr;
    if (!output_needs_work(job, none, in.output, fp, label)) return;
    throw Error(
        in.output + ": no chunk is done yet (run the chunks first" +
            (job_file.empty() ? std::string() : ": wmbatch run " + job_file + " --chunk N") + ")",
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
    throw Error(in.output + ": chunk " + std::to_string(in.chunks.front()) + " is not done",
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

}  // namespace wm::sched::farm
