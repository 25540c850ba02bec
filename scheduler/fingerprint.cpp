#include "scheduler/fingerprint.h"

#include "io/version.h"
#include "scheduler/journal.h"

namespace wm::sched {

std::string job_settings_text(const JobSpec& job) {
  std::string s = "wmbatch-farm 2\nlibav " + io::libav_versions() + "\ntask " +
                  to_string(job.task) + "\n" + job.output_settings;
  if (!job.model.weights.empty()) {
    const auto stamp = stamp_file(job.model.weights);  // absolute once validated
    s += "weights " + job.model.weights + " " + std::to_string(stamp ? stamp->size : -1) + " " +
         std::to_string(stamp ? stamp->mtime_ns : -1) + "\n";
  }
  return s;
}

}  // namespace wm::sched
