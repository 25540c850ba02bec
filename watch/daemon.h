// The watch-folder daemon (`wmbatch watch WATCH.yaml`): finds files that settle in the watched
// folders (watch/detector.h), records them in the queue (watch/queue.h) and has max_parallel
// workers (watch/worker.h) run their jobs; optionally serves the status page
// (watch/status_server.h) and takes its actions: retry a failed file (its source moved back,
// then the same queue item queued again), pause and resume (kept in the queue, so a restart
// stays paused), with a token made at every start and logged once. The user guide is
// docs/watch.md.
//
// Signals (handled here, not by the CLI): SIGTERM/SIGINT stop taking files and stop the running
// ones at their next slice boundary (they are queued again and resume from their last finished
// chunk on the next run); the daemon then exits 0. A second SIGTERM/SIGINT ends it at once (the
// queue stays consistent: a killed daemon resumes too). SIGHUP reloads WATCH.yaml; a file that
// does not validate (or whose new status page address cannot be had) is logged and the running
// configuration kept whole.
//
// One daemon per queue: the daemon holds an flock on "<queue>.lock" for its life; a second one
// exits 69 with one line naming the holder's pid.
#pragma once

#include <string>

namespace wm::watch {

// Runs in the foreground until stopped; logs to stderr. Returns the exit code: 0 after a clean
// stop, 65 bad WATCH.yaml at start, 66 missing, 69 another daemon on the queue, 73/74 queue or
// status page unavailable.
int run_daemon(const std::string& watch_file);

// `wmbatch status WATCH.yaml`: counts by state, running items with progress, last failures
// (text, or the /api/status JSON). Reads the queue; needs no running daemon. Exit code.
int print_status(const std::string& watch_file, bool json);

}  // namespace wm::watch
