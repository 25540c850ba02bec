// Running a job file inside a benchmark (wmbench e2e, upscale --devices): no progress drawn,
// timed, and on failure every input's error (or the job file's) printed and the process ended with
// the job's status.
#pragma once

#include <string>
#include <vector>

#include "scheduler/runner.h"

namespace wm::bench {

// The job file's outcomes; `seconds`: the run's wall time. Exits on failure.
std::vector<wm::sched::JobOutcome> run_job_or_exit(const std::string& yaml, double* seconds);

// The median of a benchmark's runs (0 for none).
double median(std::vector<double> runs);

}  // namespace wm::bench
