#include "scheduler/tasks.h"
#include "src/base/error.h"

namespace wm::sched {

std::unique_ptr<TaskRunner> make_latent_task_runner(const JobSpec& job) {
  throw ConfigError(job.file, job.line, "task",
                    std::string("'") + to_string(job.task) + "' is not available in this build");
}

}  // namespace wm::sched
