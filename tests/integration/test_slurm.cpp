// `wmbatch submit --slurm` against a real one-node Slurm on localhost (CTest label `slurm`).
// scripts/slurm-local.sh installs Debian's slurm-wlm and munge when missing and starts munged,
// slurmctld and slurmd (proctrack/linuxproc, task/none); each test stops them again by PID.
// Skipped (with the reason) when not root or when the packages cannot be installed. The tests
// take a lock file, so parallel ctest runs use the daemons one at a time.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/types.h>

#include <algorithm>
#include <csignal>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/integration/test_farm_helpers.h"
#include "tests/support/media.h"
#include "tests/support/run.h"

namespace wm::test {
namespace {

std::string script() { return std::string(WM_SOURCE_DIR) + "/scripts/slurm-local.sh"; }

std::string job_text(const std::string& input, const std::string& output) {
  return "input: " + input + "\noutput: " + output +
         "\nmodel: {kind: lanczos, scale: 2}\nencode: {preset: superfast}\nslice_frames: 5\n";
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to install and start Slurm";
    lock_fd_ = ::open("/tmp/wmbatch-slurm-tests.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(lock_fd_, 0);
    ASSERT_EQ(::flock(lock_fd_, LOCK_EX), 0);
    CommandResult r = run_command({"bash", script(), "start"});
    if (r.exit_code == 3) GTEST_SKIP() << "slurm-wlm/munge cannot be installed: " << r.output;
    if (r.exit_code == 5) GTEST_SKIP() << "a real Slurm is configured here; not touching it";
    ASSERT_EQ(r.exit_code, 0) << r.output;
    started_ = true;
  }
  void TearDown() override {
    if (started_) {
      // Nothing of ours may outlive the test: cancel leftovers, then stop the daemons.
      run_command({"scancel", "--user=root"});
      CommandResult r = run_command({"bash", script(), "stop"});
      EXPECT_EQ(r.exit_code, 0) << r.output;
    }
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  // `scontrol show job -o ID` as one line ("" when unknown).
  static std::string show(const std::string& id) {
    CommandResult r = run_command({"scontrol", "show", "job", "-o", id});
    return r.exit_code == 0 ? r.output : "";
  }
  static std::string field(const std::string& line, const std::string& key) {
    const auto at = line.find(key + "=");
    if (at == std::string::npos) return "";
    const auto end = line.find_first_of(" \n", at);
    return line.substr(at + key.size() + 1, end - at - key.size() - 1);
  }

  // The process whose arguments (after argv[0]) are exactly `args`; -1 when none.
  static pid_t process_with_args(const std::vector<std::string>& args) {
    for (const std::string& name : list_dir("/proc")) {
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string cmdline = read_text("/proc/" + name + "/cmdline");  // "" once gone
      std::vector<std::string> argv;
      for (size_t at = 0; at < cmdline.size();) {
        const size_t end = cmdline.find('\0', at);
        argv.push_back(cmdline.substr(at, end - at));
        if (end == std::string::npos) break;
        at = end + 1;
      }
      if (argv.size() >= args.size() + 1 &&
          std::equal(args.begin(), args.end(), argv.begin() + 1)) {
        return pid_t(std::stol(name));
      }
    }
    return -1;
  }

  bool started_ = false;
  int lock_fd_ = -1;
};

// 4 chunks through an array job, assembled by the afterok job; the result is the local run's file.
TEST_F(Slurm, SubmitRunsTheArrayAndAssembles) {
  TempDir dir("slurm-submit");
  ClipSpec spec;
  spec.width = 96;
  spec.height = 64;
  spec.frames = 40;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out/x2.mp4"));
  write_text(dir.file("ref.yaml"), job_text("in.mp4", "ref/x2.mp4"));
  std::filesystem::create_directories(dir.file("logs"));

  CommandResult dry = run_command({wmbatch_path(), "submit", "--slurm", dir.file("job.yaml"),
                                   "--chunk-frames", "10", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find("#SBATCH --array=0-3"), std::string::npos) << dry.output;
  EXPECT_NE(dry.output.find("afterok"), std::string::npos);

  CommandResult r =
      run_command({wmbatch_path(), "submit", "--slurm", dir.file("job.yaml"), "--chunk-frames",
                   "10", "--max-parallel", "2", "--gpus-per-task", "0", "--partition", "ci",
                   "--log-dir", dir.file("logs"), "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.output << "\nlogs: " << [&] {
    std::string all;
    for (const std::string& f : list_dir(dir.file("logs"))) all += read_text(dir.file("logs/" + f));
    return all;
  }();
  const auto line = nlohmann::json::parse(
      r.output.substr(r.output.find('{'), r.output.find('}') - r.output.find('{') + 1));
  EXPECT_EQ(line["chunks"], 4);
  const std::string array_id = line["array_job"];
  for (int task = 0; task < 4; ++task) {
    const std::string info = show(array_id + "_" + std::to_string(task));
    EXPECT_EQ(field(info, "JobState"), "COMPLETED") << info;
  }
  std::string logs;
  for (const std::string& f : list_dir(dir.file("logs"))) logs += read_text(dir.file("logs/" + f));
  EXPECT_NE(logs.find("Progress: 100%"), std::string::npos) << logs;

  ASSERT_EQ(run_command({wmbatch_path(), "run", dir.file("ref.yaml"), "--chunk-frames", "10",
                         "--progress", "none"})
                .exit_code,
            0);
  ASSERT_TRUE(exists(dir.file("out/x2.mp4"))) << logs;
  EXPECT_TRUE(same_bytes(dir.file("out/x2.mp4"), dir.file("ref/x2.mp4")));
  EXPECT_EQ(probe(dir.file("out/x2.mp4")).video_frames, 40);
}

// A running task is requeued (Slurm sends SIGTERM): wmbatch stops at a slice boundary with 75,
// the task runs again and resumes, and the assemble job still follows.
TEST_F(Slurm, RequeuedTaskResumesAfterSigterm) {
  TempDir dir("slurm-requeue");
  ClipSpec spec;
  spec.width = 320;
  spec.height = 240;
  spec.frames = 160;  // two chunks of 80: a couple of seconds each, time to requeue mid-way
  spec.audio = false;
  make_clip(dir.file("in.mp4"), spec);
  write_text(dir.file("job.yaml"), job_text("in.mp4", "out/x2.mp4"));
  write_text(dir.file("ref.yaml"), job_text("in.mp4", "ref/x2.mp4"));
  std::filesystem::create_directories(dir.file("logs"));

  CommandResult r = run_command({wmbatch_path(), "submit", "--slurm", dir.file("job.yaml"),
                                 "--chunk-frames", "80", "--log-dir", dir.file("logs")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto line = nlohmann::json::parse(
      r.output.substr(r.output.find('{'), r.output.find('}') - r.output.find('{') + 1));
  const std::string array_id = line["array_job"], assemble_id = line["assemble_job"];
  const std::string task = array_id + "_0";
  const std::string log = dir.file("logs/wmbatch-job-" + array_id + "_0.out");

  // Wait until task 0 has written a slice or two, then hold it still (SIGSTOP) while it is
  // requeued: on a busy machine the chunk (a couple of seconds) could otherwise finish between
  // the progress line and the requeue, and a finished task is requeued as a completed one (it
  // runs again with nothing to resume). When Slurm ends a job's steps it sends SIGCONT before
  // SIGTERM (slurmd: "tasks might be stopped"), so wmbatch sees the SIGTERM of a plain requeue.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string out = exists(log) ? read_text(log) : "";
        return std::regex_search(out, std::regex("Progress: [1-9]"));
      },
      120))
      << show(task) << (exists(log) ? read_text(log) : "no log");
  const pid_t chunk_pid = process_with_args(
      {"run", std::filesystem::canonical(dir.file("job.yaml")).string(), "--chunk", "0"});
  ASSERT_GT(chunk_pid, 0) << "no wmbatch of chunk 0: " << read_text(log);
  ASSERT_EQ(::kill(chunk_pid, SIGSTOP), 0);
  ASSERT_EQ(read_text(log).find("done, 80 frames"), std::string::npos)
      << "chunk 0 ended before it could be stopped: " << read_text(log);
  CommandResult requeue = run_command({"scontrol", "requeue", task});
  if (requeue.exit_code != 0) ::kill(chunk_pid, SIGCONT);
  ASSERT_EQ(requeue.exit_code, 0) << requeue.output;
  ASSERT_TRUE(wait_until([&] { return field(show(task), "JobState") == "PENDING"; }, 180))
      << show(task);
  // Slurm holds a requeued job back (BeginTime: AuthInfo=cred_expire + 1 seconds; the test
  // cluster's is 30, scripts/slurm-local.sh) until the node has let go of the old run: its
  // credential is revoked with the requeue's time stamp (in seconds), and a launch whose
  // credential is not newer is refused ("already killed, do not launch batch job"), after which
  // slurmctld kills it ("Killing non-startable batch job": it never runs again). Releasing it at
  // once (StartTime=now) raced that (the task ended CANCELLED on a busy machine), so Slurm starts
  // it again itself.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string state = field(show(assemble_id), "JobState");
        return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED";
      },
      600))
      << show(task) << "\n"
      << show(assemble_id);
  EXPECT_EQ(field(show(assemble_id), "JobState"), "COMPLETED") << read_text(log);
  EXPECT_EQ(field(show(task), "Restarts"), "1") << show(task);
  const std::string out = read_text(log);
  EXPECT_NE(out.find("exit 75"), std::string::npos) << "stopped at a slice boundary: " << out;
  EXPECT_NE(out.find("stopped after"), std::string::npos) << "the rerun knew: " << out;
  EXPECT_NE(out.find("done, 80 frames"), std::string::npos) << out;

  ASSERT_EQ(run_command({wmbatch_path(), "run", dir.file("ref.yaml"), "--chunk-frames", "80",
                         "--progress", "none"})
                .exit_code,
            0);
  EXPECT_TRUE(same_bytes(dir.file("out/x2.mp4"), dir.file("ref/x2.mp4")));
}

}  // namespace
}  // namespace wm::test
