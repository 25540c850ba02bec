// Slurm submission: one job array per job file (array task i runs `wmbatch run JOB --chunk i`)
// and one assemble job that depends on it (afterok). The scripts are plain bash handed to
// `sbatch` on stdin; `--dry-run` prints them instead. User guide: docs/farm.md.
//
// Task script behaviour (exit codes from scheduler/farm.h):
//  - SIGUSR1 (sent by Slurm `signal_seconds` before the time limit, --signal=B:USR1@N) or
//    SIGTERM (scancel, preemption, `scontrol requeue`) reaches the script, which asks wmbatch to
//    stop at the next slice boundary with SIGUSR1 (never escalates; see tools/wmbatch.cpp).
//  - exit 75 after SIGUSR1: the task requeues itself (`scontrol requeue`), and resumes.
//    After SIGTERM Slurm decides (a requeue requeues, scancel cancels).
//  - exit 64/65/66/73: bad job, input or output; never retried (the assemble job is then
//    cancelled: --kill-on-invalid-dep=yes).
//  - any other failure: requeued up to `max_retries` times (SLURM_RESTART_COUNT).
// Array tasks are submitted with --requeue and --open-mode=append (a requeued task's log goes on
// in the same file).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/farm.h"

namespace wm::sched {

struct SlurmOptions {
  std::string partition;   // empty: the cluster's default
  int gpus_per_task = -1;  // -1: 1 when the job asks for GPUs (devices not cpu), else 0
  int cpus_per_task = 0;   // 0: Slurm's default
  int max_parallel = 0;    // array throttle (%K); 0: no limit
  int64_t chunk_frames = 0;
  std::string time_limit;  // --time; empty: the partition's
  int signal_seconds = 120;
  int max_retries = 2;
  std::string log_dir;                   // --output folder; empty: Slurm's default (cwd)
  std::vector<std::string> sbatch_args;  // extra sbatch options for both jobs
  std::string wmbatch;                   // absolute path of the wmbatch the tasks run
  bool dry_run = false;
  bool wait = false;  // wait until the assemble jobs end; exit 0 only when all COMPLETED
};

struct SlurmScripts {
  std::string job_file;  // absolute
  int64_t chunks = 0;
  std::string array_script;     // every sbatch option is an #SBATCH line
  std::string assemble_script;  // the dependency is given on the command line
};

// The two scripts of one job file (pure; `plan` gives the chunk count).
SlurmScripts make_slurm_scripts(const FarmPlan& plan, const std::string& job_file_abs,
                                const SlurmOptions& options);

// Plans and submits every job file; prints one JSON line per job file to stdout:
// {"job_file":…, "chunks":N, "array_job":"ID", "assemble_job":"ID"} (dry run: the scripts and
// sbatch commands instead). Returns the exit code; never throws wm::Error.
int submit_slurm(const std::vector<std::string>& job_files, const SlurmOptions& options,
                 const std::atomic<bool>* cancel);

// Single-quotes `s` for a POSIX shell.
std::string shell_quote(const std::string& s);

}  // namespace wm::sched
