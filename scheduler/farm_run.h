// Farm stage "run": one chunk to its segment (or a whole-input chunk straight to its output).
// Internal to the farm (scheduler/farm*.cpp); the CLI contract is scheduler/farm.h, the watch
// daemon's scheduler/farm_input.h.
//
// Owns the task runners of a job's chunks (JobRunners: models loaded once, kept across chunks and
// inputs), the traits planning reads (TraitsCache), and how often a causal model's state is saved
// (StateLedger). Files, fingerprints and locks come from the journal stage (farm_journal.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "scheduler/farm.h"
#include "scheduler/farm_plan.h"
#include "scheduler/progress.h"
#include "src/job_spec.h"

namespace wm::sched {
class TaskRunner;
}

namespace wm::sched::farm {

// What saving causal states has cost against the chunks' own work, per sequence (an input and
// its settings), for the chunks one JobRunners runs: a state is saved after a chunk only while
// saving stays within kStateBudget of the work (always after the first chunk it runs of a
// sequence). At 1080p the official Wan2.1 VAE's state is ~15 GiB: saved after every 240-frame
// chunk it would cost a large part of the chunk's time; so it is saved every few chunks, and a
// resumed chunk runs the chunks since the newest state again (not written) before its own frames.
class StateLedger {
 public:
  static constexpr double kStateBudget = 0.1;
  bool due(const std::string& sequence) const;
  // A chunk of `sequence` took `chunk_seconds`, of which `save_seconds` saving its state; `last`:
  // the sequence's last chunk (forgotten).
  void account(const std::string& sequence, double chunk_seconds, double save_seconds, bool last);

 private:
  struct Costs {
    double work_seconds = 0, save_seconds = 0;
    int chunks = 0;
  };
  std::map<std::string, Costs> costs_;
};

// The task runners of one job's chunks, built on first use and kept across inputs (models load
// once): the whole-input runner, and the segment runner (audio and subtitles off: assembly muxes
// them from the source); the model's traits for planning; the state ledger. One thread at a time.
class JobRunners {
 public:
  explicit JobRunners(JobSpec job);
  ~JobRunners();
  JobRunners(const JobRunners&) = delete;
  JobRunners& operator=(const JobRunners&) = delete;
  const JobSpec& job() const { return job_; }
  TaskRunner& get(bool whole);
  TraitsCache& traits() { return traits_; }
  StateLedger& ledger() { return ledger_; }

 private:
  JobSpec job_;
  std::unique_ptr<TaskRunner> whole_, segment_;
  TraitsCache traits_;
  StateLedger ledger_;
};

// Called on the running thread: a chunk's work starts (not for a chunk found finished), a slice
// of it was written (frames of the chunk so far), a chunk is finished — by this call or found
// finished by an earlier one (`frames` in its segment).
struct ChunkHooks {
  std::function<void(const Chunk&)> on_start;
  std::function<void(int64_t frames_written)> on_slice;
  std::function<void(const Chunk&, int64_t frames)> on_done;
};

// "chunk N (output, frames A-B)".
std::string chunk_label(const Chunk& c);

// Runs one chunk of `runners.job()` to its segment (or a whole-input chunk to its output), unless
// the journal says it is done; takes the chunk's lock (and a whole-input chunk the output's).
// Uses options.cancel. Throws wm::Error (Cancelled: nothing of the chunk was kept).
void run_chunk(const Chunk& c, const FarmOptions& options, const ChunkHooks& hooks,
               Progress& progress, JobRunners& runners);

}  // namespace wm::sched::farm
