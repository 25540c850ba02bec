#include "tests/support/run.h"
#include "src/models/seedvr2/seedvr2_vae.h"
#include "src/models/wan21/wan21_vae.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace wm::test {

CommandResult run_command(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::perror("execvp");
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  CommandResult result;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) result.output.append(buf, size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string golden_dir() { return std::string(WM_SOURCE_DIR) + "/tests/data/golden/wan21-tiny/"; }

std::string golden_file(const std::string& name) { return golden_dir() + name; }

std::string wmbatch_path() { return std::string(WM_BINARY_DIR) + "/wmbatch"; }

CommandResult wmbatch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {wmbatch_path(), "--progress", "none"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

ModelConfig tiny_vae_config(const std::string& kind, const std::string& task) {
  ModelConfig config;
  config.kind = kind;
  config.task = task;
  if (kind == "wan2.1-vae") {
    config.weights = golden_file("weights.safetensors");
    edit_options<models::Wan21VaeOptions>(config).dim = 16;
  } else {
    config.weights =
        std::string(WM_SOURCE_DIR) + "/tests/data/golden/seedvr2-tiny/weights.safetensors";
    edit_options<models::Seedvr2VaeOptions>(config).norm_groups = 4;
  }
  return config;
}

void write_text(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool exists(const std::string& path) { return std::filesystem::exists(path); }

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace wm::test
