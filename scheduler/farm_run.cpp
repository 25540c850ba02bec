#include "scheduler/farm_run.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <utility>

#include "io/output_file.h"
#include "io/segments.h"
#include "scheduler/farm_journal.h"
#include "scheduler/journal.h"
#include "scheduler/latent_segments.h"
#include "scheduler/runner.h"
#include "scheduler/tasks.h"
#include "src/base/error.h"
#include "src/base/fs.h"
#include "src/base/log.h"

namespace wm::sched::farm {

namespace {

using Clock = std::chrono::steady_clock;

bool is_last_chunk(const Chunk& c) {
  return c.range.last_frame < 0 || (c.input_frames > 0 && c.range.last_frame >= c.input_frames - 1);
}

}  // namespace

bool StateLedger::due(const std::string& sequence) const {
  const auto it = costs_.find(sequence);
  return it == costs_.end() || it->second.chunks == 0 ||
         it->second.save_seconds <= kStateBudget * it->second.work_seconds;
}

void StateLedger::account(const std::string& sequence, double chunk_seconds, double save_seconds,
                          bool last) {
  if (last) {
    costs_.erase(sequence);
    return;
  }
  Costs& c = costs_[sequence];
  c.work_seconds += std::max(0.0, chunk_seconds - save_seconds);
  c.save_seconds += save_seconds;
  ++c.chunks;
}

JobRunners::JobRunners(JobSpec job) : job_(std::move(job)) {}
JobRunners::~JobRunners() = default;

TaskRunner& JobRunners::get(bool whole) {
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

std::string chunk_label(const Chunk& c) {
  // A range of `run --frames A-B` is no chunk of the plan.
  std::string s = c.index < 0 ? std::string("frames (") + c.output
                              : "chunk " + std::to_string(c.index) + " (" + c.output;
  if (c.whole_input) return s + ")";
  s += ", frames " + std::to_string(c.range.first_frame) + "-";
  s += c.range.last_frame < 0 ? std::string("end") : std::to_string(c.range.last_frame);
  return s + ")";
}

void run_chunk(const Chunk& c, const FarmOptions& options, const ChunkHooks& hooks,
               Progress& progress, JobRunners& runners) {
  auto log = log::get("farm");
  const JobSpec& job = runners.job();
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
      if (hooks.on_done) hooks.on_done(c, rec->frames);
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
    if (hooks.on_start) hooks.on_start(c);
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
    if (hooks.on_done) hooks.on_done(c, frames);
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
  run.on_slice = [&journal, &frames_done, &hooks, first, last_frame](int64_t slice,
                                                                     int64_t written) {
    frames_done = written;
    journal.put_slice({first, last_frame, slice, written});
    if (hooks.on_slice) hooks.on_slice(written);
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
    if (!last && runners.ledger().due(carry.sequence)) {
      carry.save_to = dir + "/" + state_name(c.range.last_frame);
    }
    run.carry = &carry;
  }
  if (hooks.on_start) hooks.on_start(c);
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
  if (run.carry) runners.ledger().account(carry.sequence, rec.seconds, carry.save_seconds, last);
  if (resume && (carry.saved_bytes > 0 || last)) {
    // Later chunks start from this chunk's state now (or there are none): the one before it
    // has served.
    remove_file(dir + "/" + resume->second.file);
    put_state_record(journal, resume->first, {});
  }
  log->info("{}: done, {} frames in {:.1f} s", label, written, rec.seconds);
  if (hooks.on_done) hooks.on_done(c, written);
}

}  // namespace wm::sched::farm
