// The status page as a browser renders it (CTest label `browser`; CI installs Debian's
// `chromium`): headless Chromium loads the page of a running daemon whose queue holds a file
// named like a script, dumps the DOM after scripts would have run, and takes a screenshot.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

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

TEST(WatchBrowser, StatusPageShowsTheQueueAndAScriptNameAsText) {
  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("CI")) FAIL() << "chromium is not installed (scripts/common.sh installs it)";
    GTEST_SKIP() << "chromium is not installed";
  }
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

}  // namespace
}  // namespace wm::test
