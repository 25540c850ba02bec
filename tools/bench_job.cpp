#include "tools/bench_job.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace wm::bench {

std::vector<wm::sched::JobOutcome> run_job_or_exit(const std::string& yaml, double* seconds) {
  wm::sched::RunOptions options;
  options.progress = wm::sched::ProgressStyle::kNone;
  std::vector<wm::sched::JobOutcome> outcomes;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wm::sched::run_job_files({yaml}, options, &outcomes);
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

}  // namespace wm::bench
