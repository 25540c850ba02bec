#include "watch/status.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "parallel/devices.h"
#include "parallel/memory_budget.h"
#include "scheduler/progress.h"
#include "src/base/json_text.h"
#include "src/models/torch_side.h"

namespace wm::watch {
namespace {

using nlohmann::json;

constexpr int kQueueShown = 100;
constexpr int kHistoryShown = 50;
constexpr int kFailuresShown = 20;

json running_json(const LiveItem& l, int attempts) {
  // Frames an earlier run finished (resumed chunks) are not this run's speed.
  const double fps = l.seconds > 0 ? double(l.frames - l.frames_resumed) / l.seconds : 0.0;
  json j = {{"id", l.id},
            {"input", l.input},
            {"output", l.output},
            {"frames", l.frames},
            {"frames_total", l.frames_total},
            {"seconds", l.seconds},
            {"fps", fps},
            {"attempts", attempts},
            {"chunks_done", l.chunks_done}};
  if (!l.devices.empty()) j["devices"] = l.devices;
  j["eta_seconds"] = (fps > 0 && l.frames_total > l.frames)
                         ? json(double(l.frames_total - l.frames) / fps)
                         : json(nullptr);
  return j;
}

// The job of an item's watch entry: its job file, or "inline" for a job written in WATCH.yaml;
// "" when no entry of `spec` takes the item any more.
std::string job_of(const WatchSpec& spec, const Item& it) {
  for (const WatchEntry& e : spec.entries) {
    if (e.folder == it.folder && e.settings == it.settings) {
      return e.job.file == spec.file ? "inline" : e.job.file;
    }
  }
  return "";
}

json item_json(const Item& it, const WatchSpec& spec) {
  json j = {{"id", it.id},
            {"input", it.input},
            {"state", to_string(it.state)},
            {"attempts", it.attempts},
            {"failures", it.failures},
            {"interrupted", it.interrupted},
            {"queued_at", it.queued_at},
            {"folder", it.folder}};
  if (const std::string job = job_of(spec, it); !job.empty()) j["job"] = job;
  if (!it.output.empty()) j["output"] = it.output;
  if (!it.devices.empty()) j["devices"] = it.devices;
  if (it.state == ItemState::kDone || it.state == ItemState::kFailed) {
    j["finished_at"] = it.finished_at;
    j["frames"] = it.frames;
    j["seconds"] = it.seconds;
  }
  if (!it.last_error.empty()) {
    j["error"] = it.last_error;
    j["exit_code"] = it.exit_code;
  }
  if (it.state == ItemState::kQueued && it.next_attempt_at > 0) {
    j["next_attempt_at"] = it.next_attempt_at;
  }
  if (it.disposed) j["source_now"] = it.source_now;
  return j;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

// `text` with each byte that is not part of valid UTF-8 as "\xNN": file names are bytes, the page
// and the terminal want text.
std::string shown_bytes(const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t length = 0;  // of the UTF-8 sequence at i (at most 4 bytes), 0: none
    for (size_t n = 1; n <= 4 && i + n <= text.size() && !length; ++n) {
      if (valid_utf8(text.substr(i, n))) length = n;
    }
    if (length) {
      out.append(text, i, length);
      i += length;
    } else {
      const auto u = static_cast<unsigned char>(text[i++]);
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// A value as text to show: strings with their bytes that are not UTF-8 as "\xNN".
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? shown_bytes(it->get<std::string>()) : json_dump(*it);
}

// A duration as people read it: "4.2 s", "3 min 05 s", "2 h 07 min".
std::string duration_text(double seconds) {
  if (!(seconds >= 0)) return "";
  if (seconds < 60) return fixed(seconds, 1) + " s";
  const auto whole = int64_t(seconds);
  char buf[64];
  if (whole < 3600) {
    std::snprintf(buf, sizeof buf, "%d min %02d s", int(whole / 60), int(whole % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld h %02d min", static_cast<long long>(whole / 3600),
                  int(whole % 3600 / 60));
  }
  return buf;
}

// A time on the page, with its time zone ("" for none).
std::string when_text(double unix_seconds) {
  const std::string t = utc_text(unix_seconds);
  return t.empty() ? t : t + " UTC";
}

// Prometheus label values: backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

json status_json(Queue& queue, const std::vector<LiveItem>& live, const WatchSpec& spec,
                 bool daemon) {
  json j;
  j["watch_file"] = spec.file;
  j["queue_file"] = queue.path();
  j["daemon"] = daemon;
  j["paused"] = queue.paused();
  if (daemon) j["daemon_pid"] = int64_t(::getpid());
  j["time"] = unix_now();
  const auto counts = queue.counts();
  j["counts"] = json::object();
  for (const auto& [state, n] : counts) j["counts"][to_string(state)] = n;
  const Totals totals = queue.totals();
  j["totals"] = {{"files_processed", totals.done},
                 {"files_failed", totals.failed},
                 {"frames", totals.frames},
                 {"seconds", totals.seconds}};

  json running = json::array();
  for (const Item& it : queue.items(ItemState::kRunning, 1000)) {
    LiveItem l;
    l.id = it.id;
    l.input = it.input;
    l.output = it.output;
    l.frames = it.frames;
    l.frames_total = it.frames_total;
    l.seconds = it.started_at > 0 ? unix_now() - it.started_at : 0.0;
    l.devices = it.devices;
    for (const ChunkRow& c : queue.chunks(it.id)) l.chunks_done += c.done;
    for (const LiveItem& w : live) {
      if (w.id == it.id) l = w;
    }
    json r = running_json(l, it.attempts);
    r["folder"] = it.folder;
    if (const std::string job = job_of(spec, it); !job.empty()) r["job"] = job;
    running.push_back(r);
  }
  j["running"] = running;
  json waiting = json::array();
  for (const Item& it : queue.items(ItemState::kQueued, kQueueShown))
    waiting.push_back(item_json(it, spec));
  j["queue"] = waiting;
  json history = json::array();
  for (const Item& it : queue.history(kHistoryShown)) history.push_back(item_json(it, spec));
  j["history"] = history;
  json failures = json::array();
  for (const Item& it : queue.items(ItemState::kFailed, kFailuresShown, true)) {
    failures.push_back(item_json(it, spec));
  }
  j["failures"] = failures;
  if (daemon) {
    j["peak_rss_mib"] = sched::peak_rss_mib();
    json gpus = json::array();
    // Until a job loaded LibTorch no GPU has held anything of ours (and the page does not load it).
    const int count = models::torch_side_loaded() ? parallel::cuda_device_count() : 0;
    for (int i = 0; i < count; ++i) {
      Device d;
      d.kind = Device::Kind::kCuda;
      d.index = i;
      const int64_t peak = parallel::device_memory(d).peak;
      if (peak >= 0) {
        gpus.push_back({{"device", "cuda:" + std::to_string(i)},
                        {"peak_mib", double(peak) / double(1 << 20)}});
      }
    }
    j["gpus"] = gpus;
  }
  return j;
}

std::string status_json_text(const json& s) { return json_dump(s, 2) + "\n"; }

std::string status_html(const json& s, const std::string& token, int refresh) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  if (refresh > 0) h << "<meta http-equiv=\"refresh\" content=\"" << refresh << "\">";
  h << "<title>wmbatch watch</title><style>"
       "body{font-family:sans-serif;margin:1.5em;color:#222}"
       "table{border-collapse:collapse;margin-bottom:1.5em}"
       "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.9em}"
       "th{background:#f0f0f0}.failed{color:#a00}.done{color:#070}"
       "form{display:inline;margin:0}.paused{background:#fff3c4;padding:.4em .8em}"
       "progress{width:10em}</style></head><body>\n";
  h << "<h1>wmbatch watch</h1>\n<p>" << html_escape(str(s, "watch_file")) << "</p>\n";
  const bool paused = s.value("paused", false);
  if (paused) {
    h << "<p id=\"paused\" class=\"paused\"><b>Paused</b>: running files finish, no new file "
         "starts until the queue is resumed.</p>\n";
  }
  // The actions: plain forms (no script), each with the token (watch/status_server.h).
  const std::string token_field =
      "<input type=\"hidden\" name=\"token\" value=\"" + html_escape(token) + "\">";
  auto action_form = [&](const std::string& action, const std::string& id_field,
                         const std::string& button_id, const std::string& label) {
    return "<form method=\"post\" action=\"/api/" + action + "\">" + token_field + id_field +
           "<button type=\"submit\" id=\"" + button_id + "\">" + label + "</button></form>";
  };
  const json& c = s["counts"];
  h << "<p id=\"counts\">queued <b>" << c.value("queued", 0) << "</b> · running <b>"
    << c.value("running", 0) << "</b> · done <b>" << c.value("done", 0) << "</b> · failed <b>"
    << c.value("failed", 0) << "</b></p>\n";
  if (!token.empty()) {
    h << "<p id=\"actions\">"
      << (paused ? action_form("resume", "", "resume", "Resume the queue")
                 : action_form("pause", "", "pause", "Pause the queue"))
      << "</p>\n";
  } else {
    h << "<p id=\"actions\"><small>Retry and pause are offered on this page when it is opened "
         "on the daemon's host by its loopback address (http://127.0.0.1:PORT/).</small></p>\n";
  }
  // Where a file came from: its watched folder and its entry's job.
  auto origin = [](const json& r) {
    std::string cell = html_escape(str(r, "folder"));
    if (r.contains("job")) cell += "<br><small>job: " + html_escape(str(r, "job")) + "</small>";
    return cell;
  };

  h << "<h2>Running</h2>\n<table id=\"running\"><tr><th>#</th><th>file</th><th>folder / job</th>"
       "<th>device</th><th>output</th><th>started</th><th>attempt</th><th>progress</th>"
       "<th>chunks done</th><th>fps</th><th>ETA</th></tr>\n";
  for (const json& r : s["running"]) {
    const int64_t frames = r.value("frames", int64_t(0));
    const int64_t total = r.value("frames_total", int64_t(0));
    const double seconds = r.value("seconds", 0.0);
    h << "<tr><td>" << r.value("id", int64_t(0)) << "</td><td>" << html_escape(str(r, "input"))
      << "</td><td>" << origin(r) << "</td><td>" << html_escape(str(r, "devices")) << "</td><td>"
      << html_escape(str(r, "output")) << "</td><td>" << when_text(s.value("time", 0.0) - seconds)
      << "<br><small>" << duration_text(seconds) << " ago</small></td><td>"
      << r.value("attempts", 0) << "</td><td>";
    if (total > 0) h << "<progress max=\"" << total << "\" value=\"" << frames << "\"></progress> ";
    h << frames << (total > 0 ? " / " + std::to_string(total) : "") << "</td><td>"
      << r.value("chunks_done", int64_t(0)) << "</td><td>" << fixed(r.value("fps", 0.0), 1)
      << "</td><td>"
      << (r["eta_seconds"].is_null() ? "" : duration_text(r["eta_seconds"].get<double>()))
      << "</td></tr>\n";
  }
  h << "</table>\n";

  h << "<h2>Queue</h2>\n<table id=\"queue\"><tr><th>#</th><th>file</th><th>folder / job</th>"
       "<th>queued</th><th>attempts</th><th>next attempt</th><th>last error</th></tr>\n";
  for (const json& q : s["queue"]) {
    h << "<tr><td>" << q.value("id", int64_t(0)) << "</td><td>" << html_escape(str(q, "input"))
      << "</td><td>" << origin(q) << "</td><td>" << when_text(q.value("queued_at", 0.0))
      << "</td><td>" << q.value("attempts", 0) << "</td><td>"
      << when_text(q.value("next_attempt_at", 0.0)) << "</td><td>" << html_escape(str(q, "error"))
      << "</td></tr>\n";
  }
  h << "</table>\n";

  // The file where it is now (moved to the done or failed folder, or deleted), the folder it
  // was taken from, and for failures the attempts, the exit code and (with the token) a retry.
  h << "<h2>Recent</h2>\n<table id=\"history\"><tr><th>#</th><th>file</th><th>folder / job</th>"
       "<th>device</th><th>state</th><th>finished</th><th>frames</th><th>took</th><th>attempts</th>"
       "<th>exit</th><th>output or error</th>"
    << (token.empty() ? "" : "<th></th>") << "</tr>\n";
  for (const json& r : s["history"]) {
    const std::string state = str(r, "state");
    const std::string input = str(r, "input");
    const int64_t id = r.value("id", int64_t(0));
    std::string file = html_escape(input);
    if (r.contains("source_now")) {
      const std::string now = str(r, "source_now");
      if (now.empty()) {
        file += " (deleted)";
      } else if (now != input) {
        file = html_escape(now) + "<br><small>taken as " + html_escape(input) + "</small>";
      }
    }
    h << "<tr class=\"" << html_escape(state) << "\" id=\"item-" << id << "\"><td>" << id
      << "</td><td>" << file << "</td><td>" << origin(r) << "</td><td>"
      << html_escape(str(r, "devices")) << "</td><td>" << html_escape(state) << "</td><td>"
      << when_text(r.value("finished_at", 0.0)) << "</td><td>" << r.value("frames", int64_t(0))
      << "</td><td>" << duration_text(r.value("seconds", 0.0)) << "</td><td>"
      << r.value("attempts", 0) << "</td><td>"
      << (state == "failed" ? std::to_string(r.value("exit_code", 0)) : "") << "</td><td>"
      << html_escape(state == "failed" ? str(r, "error") : str(r, "output")) << "</td>";
    if (!token.empty()) {
      h << "<td>";
      // A failure still being recorded (its source not yet moved) is offered once it is.
      if (state == "failed" && r.contains("source_now")) {
        h << action_form("retry",
                         "<input type=\"hidden\" name=\"id\" value=\"" + std::to_string(id) + "\">",
                         "retry-" + std::to_string(id), "Retry");
      }
      h << "</td>";
    }
    h << "</tr>\n";
  }
  h << "</table>\n<p><a href=\"/api/status\">JSON</a> · <a href=\"/metrics\">metrics</a></p>\n"
       "</body></html>\n";
  return h.str();
}

std::string status_metrics(const json& s) {
  std::ostringstream m;
  m.precision(17);
  const json& t = s["totals"];
  auto metric = [&](const char* name, const char* type, const char* help, const auto& value) {
    m << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << value << "\n";
  };
  metric("wmbatch_watch_files_processed_total", "counter", "Files processed (done).",
         t.value("files_processed", int64_t(0)));
  metric("wmbatch_watch_files_failed_total", "counter", "Files given up as failed.",
         t.value("files_failed", int64_t(0)));
  metric("wmbatch_watch_frames_total", "counter", "Frames written for done files.",
         t.value("frames", int64_t(0)));
  metric("wmbatch_watch_processing_seconds_total", "counter",
         "Seconds spent processing done files.", t.value("seconds", 0.0));
  metric("wmbatch_watch_queue_length", "gauge", "Files waiting in the queue.",
         s["counts"].value("queued", int64_t(0)));
  metric("wmbatch_watch_running", "gauge", "Files being processed now.",
         s["counts"].value("running", int64_t(0)));
  metric("wmbatch_watch_paused", "gauge",
         "1 while the queue is paused (running files finish, none starts), else 0.",
         s.value("paused", false) ? 1 : 0);
  // The files in progress, summed: frames written so far and their speed (per-file labels would
  // put file names into the metrics' series).
  int64_t frames_in_progress = 0;
  double fps = 0;
  for (const json& r : s["running"]) {
    frames_in_progress += r.value("frames", int64_t(0));
    fps += r.value("fps", 0.0);
  }
  metric("wmbatch_watch_frames_in_progress", "gauge",
         "Frames written so far of the files being processed.", frames_in_progress);
  metric("wmbatch_watch_fps", "gauge", "Frames per second of the files being processed, summed.",
         fps);
  m << "# HELP wmbatch_watch_items Queue items by state.\n# TYPE wmbatch_watch_items gauge\n";
  for (const auto& [state, n] : s["counts"].items()) {
    m << "wmbatch_watch_items{state=\"" << label(shown_bytes(state)) << "\"} " << n.get<int64_t>()
      << "\n";
  }
  if (s.contains("peak_rss_mib")) {
    metric("wmbatch_watch_peak_rss_bytes", "gauge", "Peak resident memory of the daemon.",
           int64_t(s["peak_rss_mib"].get<double>() * 1048576.0));
  }
  if (s.contains("gpus") && !s["gpus"].empty()) {
    m << "# HELP wmbatch_gpu_memory_peak_bytes Peak GPU memory allocated by the daemon.\n"
         "# TYPE wmbatch_gpu_memory_peak_bytes gauge\n";
    for (const json& g : s["gpus"]) {
      m << "wmbatch_gpu_memory_peak_bytes{device=\"" << label(str(g, "device")) << "\"} "
        << int64_t(g.value("peak_mib", 0.0) * 1048576.0) << "\n";
    }
  }
  return m.str();
}

std::string status_text(const json& s) {
  std::ostringstream o;
  const json& c = s["counts"];
  o << "queue " << str(s, "queue_file") << "\n";
  if (s.value("daemon", false)) {
    o << "daemon running (pid " << s.value("daemon_pid", int64_t(0)) << ")\n";
  } else {
    o << "daemon not running\n";
  }
  if (s.value("paused", false)) o << "paused: no new file starts until the queue is resumed\n";
  o << "queued " << c.value("queued", 0) << ", running " << c.value("running", 0) << ", done "
    << c.value("done", 0) << ", failed " << c.value("failed", 0) << "\n";
  if (!s["running"].empty()) o << "\nrunning:\n";
  for (const json& r : s["running"]) {
    const int64_t total = r.value("frames_total", int64_t(0));
    o << "  " << str(r, "input") << "  " << r.value("frames", int64_t(0));
    if (total > 0)
      o << "/" << total << " frames (" << (100 * r.value("frames", int64_t(0)) / total) << "%)";
    else
      o << " frames";
    o << ", " << fixed(r.value("fps", 0.0), 1) << " fps";
    if (r.value("chunks_done", int64_t(0)) > 0)
      o << ", " << r.value("chunks_done", int64_t(0)) << " chunk(s) done";
    if (!r["eta_seconds"].is_null())
      o << ", ETA " << fixed(r["eta_seconds"].get<double>(), 0) << " s";
    o << "\n";
  }
  if (!s["failures"].empty()) o << "\nlast failures:\n";
  for (const json& f : s["failures"]) {
    o << "  " << utc_text(f.value("finished_at", 0.0)) << "  " << str(f, "error") << " (exit "
      << f.value("exit_code", 0) << ")\n";
  }
  return o.str();
}

}  // namespace wm::watch
