// Farm stage "journal": the files of an output's chunks and what they were made from. Internal to
// the farm (scheduler/farm*.cpp); the CLI contract is scheduler/farm.h, the watch daemon's
// scheduler/farm_input.h.
//
// Owns, for one output, the work folder "<output>.wmfarm/" and everything in it: the journal
// (journal.sqlite, scheduler/journal.h), segment and causal-state file names, lock files; the
// fingerprint a result is recorded with; and how an existing output is judged (ours and current,
// ours and stale, foreign). The other stages (plan, run, assemble) name files and take locks only
// through these functions.
//
// Crash safety (the one record of the farm): a segment is renamed into place before its chunk's
// row is written, a causal state's row before the chunk's row, and an assembly records the output
// it is about to rename ("output-committing") before the rename, so after a kill at any point the
// journal lists only complete files and recognises an output whose rename it did not record.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "scheduler/farm.h"
#include "scheduler/journal.h"
#include "src/job_spec.h"

namespace wm::sched::farm {

// "<output>.wmfarm" and its journal.
std::string farm_dir(const std::string& output);
std::string journal_path(const std::string& output);

// ".mp4" of "a/b.mp4"; "" when the name has none.
std::string extension_of(const std::string& path);
bool is_tensor_file(const std::string& path);

// "seg-<first>-<last><ext>" (last < 0: "-end").
std::string segment_name(const ChunkRange& r, const std::string& ext);

// What `input` and `job`'s settings are now. Throws InputError(66) when the input is gone.
Fingerprint fingerprint(const JobSpec& job, const std::string& input);

std::string host_name();
// unlink; a failure other than ENOENT is a warning.
void remove_file(const std::string& path);
// Removes a work folder whose output is complete (a failure is a warning).
void remove_farm_dir(const std::string& output);

// An exclusive flock on a lock file, waited for (cancel-aware: Cancelled). Released on
// destruction, or by the kernel when the process dies, so a killed holder never blocks the next
// run. `what` names the work in the log line said while waiting.
class FileLock {
 public:
  FileLock(const std::string& path, const std::string& what, const std::atomic<bool>* cancel);
  ~FileLock();
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

// What `output` is to the journal (null: no journal). Finishes the bookkeeping of an assembly
// killed between its rename and its output row.
OutputState output_state(Journal* journal, const std::string& output, const Fingerprint& fp);
// Records the output an assembly is about to rename into place (before the rename).
void record_committing(Journal& journal, const OutputRecord& out);

// Checks the output against on_exists before any work. Returns false when there is nothing to do
// (output done, or skipped); throws OutputError(73) for on_exists: fail.
bool output_needs_work(const JobSpec& job, Journal* journal, const std::string& output,
                       const Fingerprint& fp, const std::string& label);

// The segment a chunk row names is the file recorded (size and mtime).
bool segment_intact(const std::string& dir, const ChunkRecord& rec);

// Causal state files ("state-<last>.safetensors") and their journal rows (carried tasks).
struct StateRecord {
  std::string file;  // in the farm folder; empty: none
  int64_t size = 0;
  std::string sequence;
};
std::string state_name(int64_t last_frame);
// Records (or, with an empty file, forgets) the state after `last_frame`.
void put_state_record(Journal& journal, int64_t last_frame, const StateRecord& r);
// The newest state recorded for `sequence` in `dir` that ends before frame `before`, and the
// last frame it follows; nullopt when none.
std::optional<std::pair<int64_t, StateRecord>> newest_state(Journal& journal,
                                                            const std::string& dir,
                                                            const std::string& sequence,
                                                            int64_t before);
// Removes the causal state files left in a farm folder (after assembly).
void remove_states(const std::string& dir);

}  // namespace wm::sched::farm
