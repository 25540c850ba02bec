// The settings half of a farm fingerprint (scheduler/journal.h's Fingerprint::settings): what a
// segment or an output was made with, so that a rerun with other settings redoes it instead of
// reusing it. Derived from the whole validated job (JobSpec::output_settings: every key of the
// job's document except the few that only choose what to read, where to write or how to
// schedule), not from a hand-kept list, so a key added to the job format is in it by default;
// plus what the document only names: the weights file (its path, size and mtime) and the libav
// versions that encode.
#pragma once

#include <string>

#include "src/job_spec.h"

namespace wm::sched {

// The text that is hashed (stable across builds and hosts).
std::string job_settings_text(const JobSpec& job);

}  // namespace wm::sched
