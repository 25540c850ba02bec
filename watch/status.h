// The daemon's status, one snapshot in four forms: JSON (/api/status, `wmbatch status --json`),
// an HTML page (/), Prometheus text (/metrics) and plain text (`wmbatch status`). The snapshot
// holds file names, states, counts and timings; never file contents, never configuration
// secrets (there are none: WATCH.yaml holds paths and job settings).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "watch/queue.h"
#include "watch/watch_spec.h"
#include "watch/worker.h"

namespace wm::watch {

// `live`: what the workers of this process are doing (progress, fps, ETA, devices); when empty
// (another process reads the queue), the running items come from the queue, with the progress
// the daemon recorded there. `spec`: the WATCH.yaml (each item's job is its entry's). `daemon`:
// whether this snapshot is taken by the daemon itself. `paused`: whether the queue is paused.
nlohmann::json status_json(Queue& queue, const std::vector<LiveItem>& live, const WatchSpec& spec,
                           bool daemon);

// The JSON text (/api/status, `wmbatch status --json`): paths are bytes, and those that are not
// UTF-8 are written as \udcXX escapes (src/base/json_text.h), so any file name is served.
std::string status_json_text(const nlohmann::json& status);
// The HTML page, the metrics and the text: file names and errors are shown with the bytes that
// are not UTF-8 as "\xNN" (and HTML-escaped on the page). With a `token` the page has the
// actions' forms (retry a failed file, pause/resume), each carrying it (watch/status_server.h
// says to whom); without, it says where they are offered. `refresh`: seconds between the page's
// reloads, 0 none.
std::string status_html(const nlohmann::json& status, const std::string& token = "",
                        int refresh = 2);
std::string status_metrics(const nlohmann::json& status);
std::string status_text(const nlohmann::json& status);

// &, <, >, " and ' as HTML entities.
std::string html_escape(const std::string& text);

}  // namespace wm::watch
