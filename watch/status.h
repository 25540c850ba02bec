// The daemon's status, one snapshot in four forms: JSON (/api/status, `wmbatch status --json`),
// an HTML page (/), Prometheus text (/metrics) and plain text (`wmbatch status`). The snapshot
// holds file names, states, counts and timings; never file contents, never configuration
// secrets (there are none: WATCH.yaml holds paths and job settings).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "watch/queue.h"
#include "watch/worker.h"

namespace wm::watch {

// `live`: what the workers of this process are doing (progress, fps, ETA); when empty (another
// process reads the queue), the running items come from the queue, with the progress the daemon
// recorded there. `daemon`: whether this snapshot is taken by the daemon itself.
nlohmann::json status_json(Queue& queue, const std::vector<LiveItem>& live,
                           const std::string& watch_file, bool daemon);

std::string status_html(const nlohmann::json& status);
std::string status_metrics(const nlohmann::json& status);
std::string status_text(const nlohmann::json& status);

// &, <, >, " and ' as HTML entities.
std::string html_escape(const std::string& text);

}  // namespace wm::watch
