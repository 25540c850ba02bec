// Running the real binaries from tests (wmbatch, ffmpeg): fork/exec, output captured.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace wm::test {

struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal when killed
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (searched in PATH) with the arguments; blocks until it exits.
CommandResult run_command(const std::vector<std::string>& argv);

// build/wmbatch of this build tree.
std::string wmbatch_path();

// The shared folder beside the checkout that holds the golden vectors (../shared, or
// $WM_SHARED_DIR). Tests that need it start with WM_REQUIRE_GOLDEN().
std::string shared_dir();
bool have_golden();

void write_text(const std::string& path, const std::string& content);
std::string read_text(const std::string& path);
bool exists(const std::string& path);
// Files in `dir` (names only), sorted.
std::vector<std::string> list_dir(const std::string& dir);

}  // namespace wm::test

// Skips a test when the golden vectors are not there, except under CI (CI=true), where a missing
// folder is a failure: CI always has ../shared beside the clone.
#define WM_REQUIRE_GOLDEN()                                                                    \
  do {                                                                                         \
    if (!::wm::test::have_golden()) {                                                          \
      if (std::getenv("CI")) FAIL() << "golden vectors missing: " << ::wm::test::shared_dir(); \
      GTEST_SKIP() << "golden vectors not found in " << ::wm::test::shared_dir()               \
                   << " (set WM_SHARED_DIR)";                                                  \
    }                                                                                          \
  } while (0)
