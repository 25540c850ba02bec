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

struct WatchEntry {
  int line = 0;                       // of the entry in WATCH.yaml
  std::string folder;                 // absolute, lexically normal
  bool recursive = false;             // also the sub-folders (not the done/failed folders)
  std::vector<std::string> patterns;  // fnmatch(3) patterns on the file name
  // The job, validated with the folder's patterns as its input; run_item() fills in one file.
  // Its `output` is the template (the entry's `output:` when given, else the job's).
  JobSpec job;
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
  // Each file runs as chunks of about this many frames (scheduler/farm.h run_input_chunks), so a
  // killed or stopped daemon resumes a file from its last finished chunk; 0: whole files (a kill
  // redoes the file).
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

}  // namespace wm::watch
