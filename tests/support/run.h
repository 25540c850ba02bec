// Running the real binaries from tests (wmbatch, ffmpeg): fork/exec, output captured.
#pragma once

#include <string>
#include <vector>

#include "src/model.h"

namespace wm::test {

struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal when killed
  std::string output;  // stdout and stderr together
};

// Runs argv[0] (searched in PATH) with the arguments; blocks until it exits.
CommandResult run_command(const std::vector<std::string>& argv);

// build/wmbatch of this build tree.
std::string wmbatch_path();
// Runs build/wmbatch --progress none ARGS.
CommandResult wmbatch(const std::vector<std::string>& args);

// The Wan2.1 golden vectors of the repository (tests/data/golden/wan21-tiny: reference
// implementation, float64, random weights, dim 16), with a trailing '/'; golden_file(name) is a
// file in it. The suite needs nothing outside the checkout.
std::string golden_dir();
std::string golden_file(const std::string& name);
// The tiny golden VAEs of tests/data as a model config: kind "wan2.1-vae" (wan21-tiny, dim 16)
// or "seedvr2-vae" (seedvr2-tiny, 4 norm groups), for `task` (encode | decode).
ModelConfig tiny_vae_config(const std::string& kind, const std::string& task);

void write_text(const std::string& path, const std::string& content);
std::string read_text(const std::string& path);
bool exists(const std::string& path);
// Files in `dir` (names only), sorted.
std::vector<std::string> list_dir(const std::string& dir);

}  // namespace wm::test
