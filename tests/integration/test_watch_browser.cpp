// The status page as a browser renders it (CTest label `browser`; CI installs Debian's
// `chromium`): headless Chromium loads the page of a running daemon whose queue holds a file
// named like a script, dumps the DOM after scripts would have run, and takes a screenshot; and,
// driven over the DevTools protocol, reads the details of running and failed files and clicks
// the page's Pause, Retry and Resume buttons (plain forms: the page has no script).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/integration/test_watch_helpers.h"

namespace wm::test {
namespace {

namespace stdfs = std::filesystem;

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    if (run_command({"sh", "-c", std::string("command -v ") + name + " >/dev/null"}).exit_code ==
        0) {
      return name;
    }
  }
  return "";
}

// Headless Chromium with nothing of its own going on (no sync, updates, network chatter).
CommandResult headless(const std::string& browser, const std::string& what, const std::string& url,
                       const std::string& profile) {
  const std::string cmd = "timeout 120 " + browser +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update"
                          " --disable-sync --window-size=1200,800 --user-data-dir='" +
                          profile + "' " + what + " '" + url + "' 2>/dev/null";
  return run_command({"sh", "-c", cmd});
}

// Headless Chromium driven over the DevTools protocol on a pair of pipes
// (--remote-debugging-pipe: it reads commands on its fd 3 and writes answers and events on its
// fd 4, each a JSON text ending with a NUL byte). One tab.
class Browser {
 public:
  Browser(const std::string& browser, const std::string& profile) {
    int to[2], from[2];
    if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) return;
    const std::string profile_arg = "--user-data-dir=" + profile;
    std::vector<std::string> args = {browser,
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--disable-quic",
                                     "--no-first-run",
                                     "--disable-background-networking",
                                     "--disable-component-update",
                                     "--disable-sync",
                                     "--window-size=1600,1000",
                                     "--remote-debugging-pipe",
                                     profile_arg,
                                     "about:blank"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      // Above 4 first, so that placing one pipe end does not close the other.
      const int in = ::fcntl(to[0], F_DUPFD, 10), out = ::fcntl(from[1], F_DUPFD, 10);
      ::dup2(in, 3);
      ::dup2(out, 4);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    to_ = to[1];
    from_ = from[0];
    const nlohmann::json target = call("Target.createTarget", {{"url", "about:blank"}});
    session_ = call("Target.attachToTarget",
                    {{"targetId", target.value("targetId", "")}, {"flatten", true}})
                   .value("sessionId", "");
  }
  ~Browser() {
    if (to_ >= 0) {
      call("Browser.close", nlohmann::json::object(), false);
      ::close(to_);
    }
    if (from_ >= 0) ::close(from_);
    if (pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool ready() const { return !session_.empty(); }

  // A command of the tab (or of the browser); its result, or {"error": ...}.
  nlohmann::json call(const std::string& method, const nlohmann::json& params, bool tab = true) {
    const int id = ++last_id_;
    nlohmann::json message = {{"id", id}, {"method", method}, {"params", params}};
    if (tab && !session_.empty()) message["sessionId"] = session_;
    const std::string text = message.dump() + std::string(1, '\0');
    if (::write(to_, text.data(), text.size()) != ssize_t(text.size())) {
      return {{"error", "cannot write to the browser"}};
    }
    for (;;) {
      size_t end;
      while ((end = buffer_.find('\0')) == std::string::npos) {
        // A guard against a hang, not a speed bound.
        pollfd p{from_, POLLIN, 0};
        if (::poll(&p, 1, int(kPatienceSeconds * 1000)) <= 0) return {{"error", "no answer"}};
        char buf[65536];
        const ssize_t n = ::read(from_, buf, sizeof buf);
        if (n <= 0) return {{"error", "the browser went away"}};
        buffer_.append(buf, size_t(n));
      }
      const nlohmann::json answer = nlohmann::json::parse(buffer_.substr(0, end));
      buffer_.erase(0, end + 1);
      if (answer.value("id", 0) != id) continue;  // an event
      if (answer.contains("error")) return {{"error", answer["error"]}};
      return answer.value("result", nlohmann::json::object());
    }
  }
  // The value of a JavaScript expression in the tab (the test's own probe: the page has none).
  nlohmann::json eval(const std::string& expression) {
    const nlohmann::json r =
        call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}});
    if (r.contains("error") || r.contains("exceptionDetails")) return nullptr;
    return r["result"].value("value", nlohmann::json());
  }
  // Goes to `url` and waits until the page is loaded. A navigation not loaded after
  // kRenavigateSeconds is asked for again, within kPatienceSeconds in all: once in CI (2026-11-30)
  // a navigation to the page the tab showed never loaded in 300 s, on a loaded 2-core machine,
  // with nothing to say why. last_go() says what the tab showed when go() gave up.
  bool go(const std::string& url) {
    constexpr double kRenavigateSeconds = 30;
    using Clock = std::chrono::steady_clock;
    auto seconds_since = [](Clock::time_point t) {
      return std::chrono::duration<double>(Clock::now() - t).count();
    };
    const Clock::time_point start = Clock::now();
    last_go_.clear();
    while (seconds_since(start) < kPatienceSeconds) {
      const nlohmann::json asked = call("Page.navigate", {{"url", url}});
      if (asked.contains("error")) {
        last_go_ += "Page.navigate: " + asked["error"].dump() + "\n";
      } else if (asked.contains("errorText")) {
        last_go_ += "Page.navigate: " + asked["errorText"].dump() + "\n";
      }
      const Clock::time_point now = Clock::now();
      while (seconds_since(now) < kRenavigateSeconds) {
        if (eval("document.readyState === 'complete' && location.href") == url) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      last_go_ += "not loaded after " + std::to_string(int(seconds_since(start))) +
                  " s: the tab shows " +
                  eval("location.href + ' (' + document.readyState + ')'").dump() + "\n";
    }
    return false;
  }
  const std::string& last_go() const { return last_go_; }
  // The text of the element `id` ("" when there is none).
  std::string text(const std::string& id) {
    const nlohmann::json v =
        eval("(e => e ? e.innerText : '')(document.getElementById('" + id + "'))");
    return v.is_string() ? v.get<std::string>() : "";
  }
  // The cells' text of the table rows `selector` matches, row by row.
  std::vector<std::vector<std::string>> cells(const std::string& selector) {
    const nlohmann::json v = eval("Array.from(document.querySelectorAll('" + selector +
                                  "')).map(r => Array.from(r.cells).map(c => c.innerText))");
    std::vector<std::vector<std::string>> out;
    if (!v.is_array()) return out;
    for (const auto& row : v) out.push_back(row.get<std::vector<std::string>>());
    return out;
  }
  // A click with the mouse in the middle of the element `id`, as a person makes it.
  bool click(const std::string& id) {
    const nlohmann::json box = eval(
        "(e => { if (!e) return null; e.scrollIntoView({block: 'center'}); const r = "
        "e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })"
        "(document.getElementById('" +
        id + "'))");
    if (!box.is_array()) return false;
    for (const char* type : {"mouseMoved", "mousePressed", "mouseReleased"}) {
      nlohmann::json e = {{"type", type}, {"x", box[0]}, {"y", box[1]}};
      if (std::string(type) != "mouseMoved") {
        e["button"] = "left";
        e["clickCount"] = 1;
      }
      if (call("Input.dispatchMouseEvent", e).contains("error")) return false;
    }
    return true;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  int last_id_ = 0;
  std::string buffer_;
  std::string session_;
  std::string last_go_;
};

// The browser, or "" to skip: only when WM_NO_BROWSER=1 says so. A missing chromium fails the
// test otherwise, so that CI (whose scripts/common.sh installs it) never skips it silently.
std::string browser_or_skip() {
  const std::string browser = chromium();
  const char* opt_out = std::getenv("WM_NO_BROWSER");
  if (browser.empty() && !(opt_out && std::string(opt_out) == "1")) {
    ADD_FAILURE() << "chromium is not installed (scripts/common.sh installs it; WM_NO_BROWSER=1 "
                     "or ctest -LE browser skips these tests)";
  }
  return browser;
}

TEST(WatchBrowser, StatusPageShowsTheQueueAndAScriptNameAsText) {
  const std::string browser = browser_or_skip();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (WM_NO_BROWSER=1)";
  WatchSetup s("browser");
  // Outputs go to a "folder" that is a file: every file fails with a retryable error and waits
  // in the queue (back-off of an hour) with its error shown.
  write_text(s.dir().file("blocked"), "not a folder");
  s.write_config("http: {listen: 127.0.0.1:0}\nretry: {backoff_seconds: 3600}\n");
  std::string config = read_text(s.watch_file());
  config.replace(config.find("out/{stem}"), 10, "blocked/{stem}");
  write_text(s.watch_file(), config);
  make_small_clip(s.dir().file("clip.mp4"));
  s.start();
  const int port = s.http_port();
  ASSERT_GT(port, 0) << s.log();
  const std::string evil = "<script>document.title='pwned'<.mp4";
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in(evil));
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("plain.mp4"));
  ASSERT_TRUE(wait_until([&] {
    const auto rows = s.queue();
    return rows.size() == 2 && rows[0].failures == 1 && rows[1].failures == 1;
  })) << s.log();

  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const CommandResult dom = headless(browser, "--dump-dom", url, s.dir().file("profile-dom"));
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  // Had the name become markup, its script would have run and renamed the page.
  EXPECT_NE(dom.output.find("<title>wmbatch watch</title>"), std::string::npos) << dom.output;
  EXPECT_EQ(dom.output.find("pwned</title>"), std::string::npos) << dom.output;
  EXPECT_EQ(dom.output.find("<script"), std::string::npos) << dom.output;
  // The name is there as text, in the queue table, beside the other file and the error.
  const size_t queue = dom.output.find("<table id=\"queue\">");
  ASSERT_NE(queue, std::string::npos) << dom.output;
  const std::string table = dom.output.substr(queue, dom.output.find("</table>", queue) - queue);
  EXPECT_NE(table.find("&lt;script&gt;document.title='pwned'&lt;.mp4"), std::string::npos) << table;
  EXPECT_NE(table.find("plain.mp4"), std::string::npos) << table;
  EXPECT_NE(table.find("cannot create output folder"), std::string::npos) << table;
  EXPECT_NE(dom.output.find("queued <b>2</b>"), std::string::npos) << dom.output;

  const std::string png = s.dir().file("status.png");
  const CommandResult shot =
      headless(browser, "--screenshot='" + png + "'", url, s.dir().file("profile-shot"));
  ASSERT_EQ(shot.exit_code, 0) << shot.output;
  const std::string image = read_text(png);
  ASSERT_GT(image.size(), 1000u) << "no screenshot";
  EXPECT_EQ(image.compare(0, 8, "\x89PNG\r\n\x1a\n"), 0);
  if (const char* keep = std::getenv("WM_KEEP_SCREENSHOT")) stdfs::copy_file(png, keep);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(WatchBrowser, PageShowsWhereEachFileIsAndItsButtonsRetryPauseAndResume) {
  const std::string browser = browser_or_skip();
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (WM_NO_BROWSER=1)";
  WatchSetup s("browser-act");
  // A job file of its own (the page names it), and a failed file given up at once.
  stdfs::create_directories(s.dir().file("jobs"));
  write_text(s.dir().file("jobs/x2.yaml"),
             "task: upscale\nmodel: {kind: lanczos, scale: 2}\n"
             "encode: {codec: libx264, preset: ultrafast, crf: 20}\noutput: out/{stem}.mp4\n");
  write_text(s.watch_file(),
             "settle_seconds: 0.3\npoll_seconds: 1\nchunk_frames: 48\n"
             "http: {listen: 127.0.0.1:0}\nretry: {max_attempts: 1}\n"
             "watch:\n  - folder: in\n    job: jobs/x2.yaml\n    output: out/{stem}_x2.mp4\n"
             "    failed_folder: failed\n");
  make_small_clip(s.dir().file("clip.mp4"));
  // Long enough to be seen running by the page (a few seconds), however fast the machine.
  make_small_clip(s.dir().file("long.mp4"), 960, 320, 240);
  write_text(s.out("bad_x2.mp4"), "in the way");  // bad.mp4 fails with 73: its output exists
  s.start();
  const int port = s.http_port();
  ASSERT_GT(port, 0) << s.log();
  stdfs::copy_file(s.dir().file("clip.mp4"), s.in("bad.mp4"));
  ASSERT_TRUE(s.wait_until_disposed(1)) << s.log();
  ASSERT_EQ(s.queue()[0].state, "failed");
  stdfs::copy_file(s.dir().file("long.mp4"), s.in("long.mp4"));

  Browser b(browser, s.dir().file("profile-act"));
  ASSERT_TRUE(b.ready()) << "headless chromium did not start with --remote-debugging-pipe";
  const std::string base = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string still = base + "?refresh=0";  // no reload under the test's clicks

  // The running file: its start time (UTC) and how long ago, its folder and job, its device,
  // chunks done. Looked at until a chunk is done.
  // Columns: # file folder/job device output started attempt progress chunks fps ETA.
  std::vector<std::string> running;
  ASSERT_TRUE(wait_until([&] {
    if (!b.go(still)) return true;
    const auto rows = b.cells("#running tr:not(:first-child)");
    running = rows.empty() ? std::vector<std::string>() : rows[0];
    const auto queue = s.queue();
    const bool over = queue.size() > 1 && queue[1].state != "running" && queue[1].state != "queued";
    return over || (running.size() == 11 && running[8] != "0");
  }));
  ASSERT_EQ(running.size(), 11u)
      << "long.mp4 finished before the page showed it running: make it longer";
  EXPECT_EQ(running[0], "2");
  EXPECT_EQ(running[1], s.in("long.mp4"));
  EXPECT_EQ(running[2], s.dir().file("in") + "\njob: " + s.dir().file("jobs/x2.yaml"));
  EXPECT_EQ(running[3], "cpu");
  EXPECT_EQ(running[4], s.out("long_x2.mp4"));
  EXPECT_TRUE(std::regex_match(
      running[5], std::regex("20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC\n"
                             "[0-9.]+ s ago")))
      << running[5];
  EXPECT_EQ(running[6], "1");
  EXPECT_GE(std::stoi(running[8]), 1);
  // The failed file where it is now (the failed folder), as which it was taken, its exit code
  // and attempts, the time it failed with its zone, and its Retry button.
  // Columns: # file folder/job device state finished frames took attempts exit error (retry).
  const auto failed_rows = b.cells("#item-1");
  ASSERT_EQ(failed_rows.size(), 1u);
  const std::vector<std::string>& failed = failed_rows[0];
  ASSERT_EQ(failed.size(), 12u);
  EXPECT_EQ(failed[1], s.dir().file("failed/bad.mp4") + "\ntaken as " + s.in("bad.mp4"));
  EXPECT_EQ(failed[2], s.dir().file("in") + "\njob: " + s.dir().file("jobs/x2.yaml"));
  EXPECT_EQ(failed[3], "cpu");
  EXPECT_EQ(failed[4], "failed");
  EXPECT_TRUE(std::regex_match(failed[5], std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} UTC")))
      << failed[5];
  EXPECT_EQ(failed[8], "1");
  EXPECT_EQ(failed[9], "73");
  EXPECT_NE(failed[10].find("output exists"), std::string::npos) << failed[10];
  EXPECT_EQ(failed[11], "Retry");

  // Pause, with the mouse: the page comes back paused, the running file runs on.
  ASSERT_TRUE(b.click("pause")) << b.text("actions");
  ASSERT_TRUE(wait_until([&] { return !b.text("paused").empty(); }))
      << b.eval("location.href + '\\n' + document.body.innerText").dump() << s.log();
  EXPECT_NE(b.text("paused").find("Paused"), std::string::npos);
  EXPECT_NE(b.eval("document.getElementById('resume') !== null"), false);
  const CommandResult st = run_command({wmbatch_path(), "status", s.watch_file(), "--json"});
  EXPECT_EQ(nlohmann::json::parse(st.output)["paused"], true) << st.output;

  // Retry, with the mouse, once what failed it is gone: the file goes back to in/ and waits in
  // the queue, paused.
  stdfs::remove(s.out("bad_x2.mp4"));
  ASSERT_TRUE(b.go(still)) << b.last_go() << s.log();
  ASSERT_TRUE(b.click("retry-1")) << b.text("history");
  ASSERT_TRUE(wait_until([&] {
    return b.text("queue").find(s.in("bad.mp4")) != std::string::npos;
  })) << b.text("queue")
      << s.log();
  EXPECT_TRUE(exists(s.in("bad.mp4")));
  EXPECT_FALSE(exists(s.dir().file("failed/bad.mp4")));
  ASSERT_TRUE(wait_until([&] {
    return s.log().find("paused: " + s.in("bad.mp4")) != std::string::npos;
  })) << s.log();
  EXPECT_EQ(s.queue()[0].state, "queued");
  EXPECT_EQ(s.queue()[1].state, "done") << "the running file finishes while paused";

  // Resume, with the mouse: the retried file is done.
  ASSERT_TRUE(b.go(still)) << b.last_go() << s.log();
  ASSERT_TRUE(b.click("resume")) << b.text("actions");
  ASSERT_TRUE(s.wait_finished(2)) << s.log();
  ASSERT_TRUE(wait_until([&] {
    if (!b.go(still)) return true;
    const auto rows = b.cells("#item-1");
    return !rows.empty() && rows[0].size() == 12 && rows[0][4] == "done";
  })) << b.text("history");
  EXPECT_EQ(b.text("paused"), "");
  const auto done = b.cells("#item-1");
  EXPECT_EQ(done[0][1], s.in("bad.mp4")) << "kept where it was taken from (on_done: keep)";
  EXPECT_EQ(done[0][8], "2") << "attempts kept, and one more";
  EXPECT_TRUE(std::regex_match(done[0][7], std::regex("[0-9.]+ s"))) << done[0][7];
  EXPECT_EQ(done[0][10], s.out("bad_x2.mp4"));
  EXPECT_EQ(done[0][11], "") << "no retry for a done file";
  EXPECT_EQ(s.queue()[0].attempts, 2);
  EXPECT_EQ(probe(s.out("bad_x2.mp4")).video_frames, 8);
  EXPECT_EQ(s.stop(), 0) << s.log();
}

}  // namespace
}  // namespace wm::test
