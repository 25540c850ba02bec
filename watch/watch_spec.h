// WATCH.yaml, validated: which folders the daemon watches and what it does with each file that
// settles there. load_watch_file checks every key (unknown keys, wrong types, missing fields, bad
// values, jobs through src/job_spec.h's own validation) before any work, and throws ConfigError
// ("FILE:LINE: KEY: problem", exit 65) on the first problem. The format is docs/watch.md.
#pragma once

#include <string>
#include <vector>

#include "src/job_spec.h"

namespace wm::watch {

// What happens to a source once its output is verified and in place.
enum class OnDone { kKeep, kMove, kDelete };
const char* to_string(OnDone o);

// Symbolic links in a watched folder (`follow_symlinks`): never taken (the default), taken when
// they lead to a file inside the watched folder, or taken wherever they lead.
enum class FollowSymlinks { kNo, kInside, kOutside };

struct WatchEntry {
  int line = 0;                       // of the entry in WATCH.yaml
  std::string folder;                 // absolute, lexically normal
  std::string real_folder;            // `folder` with its symbolic links resolved
  bool recursive = false;             // also the sub-folders (not the done/failed folders)
  std::vector<std::string> patterns;  // fnmatch(3) patterns on the file name
  FollowSymlinks follow_symlinks = FollowSymlinks::kNo;
  // The job, validated with the folder's patterns as its input; run_item() fills in one file.
  // Its `output` is the template (the entry's `output:` when given, else the job's), which
  // output_for() expands.
  JobSpec job;
  // The output template as written (the entry's `output:`, else the job's), with the daemon's
  // own placeholder {subdir}; output_for() expands it. `job.output` is the same without {subdir}
  // (an entry's relative template made absolute against WATCH.yaml's folder).
  std::string output;
  int output_line = 0;  // of the template's key in WATCH.yaml (the entry's line for a job's)
  // Where a relative `output` resolves: WATCH.yaml's folder for the entry's own `output:`, the
  // job file's folder for the job's (absolute).
  std::string output_dir;
  // Hash of every setting that changes what is made of a file (the job's settings, the output
  // template): part of a queue item's fingerprint.
  std::string settings;
  OnDone on_done = OnDone::kKeep;
  std::string done_folder;    // absolute; set with on_done: move
  std::string failed_folder;  // absolute; empty: failed inputs stay where they are
};

struct RetrySpec {
  int max_attempts = 3;               // failed attempts before an input is given up
  double backoff_seconds = 30;        // wait after the first failure, doubled after each
  double backoff_max_seconds = 3600;  // cap of the wait
};

struct HttpSpec {
  bool enabled = false;  // `http:` present
  std::string host = "127.0.0.1";
  int port = 8611;  // 0: any free port (logged at start)
};

struct WatchSpec {
  std::string file;   // the WATCH.yaml, absolute
  std::string queue;  // the SQLite queue, absolute
  double poll_seconds = 30;
  double settle_seconds = 5;
  int max_parallel = 1;
  // Each file runs as chunks of about this many frames (scheduler/farm_input.h run_input_chunks),
  // so a killed or stopped daemon resumes a file from its last finished chunk; 0: whole files (a
  // kill redoes the file).
  int64_t chunk_frames = 240;
  RetrySpec retry;
  HttpSpec http;
  std::vector<WatchEntry> entries;
};

WatchSpec load_watch_file(const std::string& path);
// `path` names the text in errors and anchors relative paths.
WatchSpec parse_watch_text(const std::string& text, const std::string& path);

// Names never taken: partial or hidden files ("*.part", "*.tmp", "*.partial", ".*") and the
// daemon's own "*.error.txt" notes.
bool is_ignored_name(const std::string& name);

// The entry whose folder (and patterns, and recursion) takes the file at `path` (absolute), or
// nullptr. Files inside an entry's done or failed folder are never taken.
const WatchEntry* entry_for(const WatchSpec& spec, const std::string& path);

// The output of the file at `input` (absolute, taken by `entry`): the entry's template with
// {stem} — the file's name without its extension, as it is: a '%' in a real file name is not an
// image-sequence pattern —, {subdir} — the file's folder below the watched folder, "" at its top
// —, {ext}, {job} and {dir} (as in job files, docs/job-format.md). Lexically normal. Throws
// wm::Error (65) when it would be the input itself.
std::string output_for(const WatchEntry& entry, const std::string& input);

// Whether the file at `path` may be taken under the entry's follow_symlinks: true for a file that
// is not a symbolic link; for a link, whether the entry follows links and where this one leads.
// `why` (when given) says why not.
bool source_allowed(const WatchEntry& entry, const std::string& path, std::string* why = nullptr);

}  // namespace wm::watch
