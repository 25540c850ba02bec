#include "tools/bench_job.h"

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "src/base/error.h"

namespace wm::bench {

std::vector<wm::sched::JobOutcome> run_job_or_exit(const std::string& yaml, double* seconds) {
  wm::sched::RunOptions options;
  options.progress = wm::sched::ProgressStyle::kNone;
  std::vector<wm::sched::JobOutcome> outcomes;
  const auto t0 = std::chrono::steady_clock::now();
  int rc = 0;
  try {
    rc = wm::sched::run_job_files({yaml}, options, &outcomes);
  } catch (const wm::Error& e) {  // the job file itself refused (a device that is not there)
    std::fprintf(stderr, "wmbench: %s\n", e.what());
    std::exit(e.exit_code());
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    for (const auto& o : outcomes) {
      for (const auto& in : o.inputs) {
        if (!in.error.empty()) std::fprintf(stderr, "wmbench: %s\n", in.error.c_str());
      }
    }
    std::fprintf(stderr, "wmbench: the job %s failed (%d)\n", yaml.c_str(), rc);
    std::exit(rc);
  }
  return outcomes;
}

double median(std::vector<double> runs) {
  std::sort(runs.begin(), runs.end());
  const size_t n = runs.size();
  return n == 0 ? 0.0 : n % 2 ? runs[n / 2] : 0.5 * (runs[n / 2 - 1] + runs[n / 2]);
}

}  // namespace wm::bench
