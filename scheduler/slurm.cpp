#include "scheduler/slurm.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "src/base/error.h"
#include "src/base/json_text.h"
#include "src/base/log.h"

namespace wm::sched {
namespace {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv (searched in PATH) with `input` on stdin; collects stdout and stderr.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& input) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw Error(std::string("pipe: ") + std::strerror(errno), kExitSoftware);
  }
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno), kExitSoftware);
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "%s: %s\n", argv[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ProcessResult result;
  size_t written = 0;
  int in_fd = in_pipe[1];
  if (input.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  bool out_open = true, err_open = true;
  char buf[4096];
  while (out_open || err_open || in_fd >= 0) {
    pollfd fds[3];
    int n = 0;
    int out_i = -1, err_i = -1, in_i = -1;
    if (out_open) out_i = n, fds[n++] = {out_pipe[0], POLLIN, 0};
    if (err_open) err_i = n, fds[n++] = {err_pipe[0], POLLIN, 0};
    if (in_fd >= 0) in_i = n, fds[n++] = {in_fd, POLLOUT, 0};
    if (::poll(fds, nfds_t(n), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (out_i >= 0 && fds[out_i].revents) {
      const ssize_t r = ::read(out_pipe[0], buf, sizeof buf);
      if (r > 0)
        result.out.append(buf, size_t(r));
      else
        out_open = false;
    }
    if (err_i >= 0 && fds[err_i].revents) {
      const ssize_t r = ::read(err_pipe[0], buf, sizeof buf);
      if (r > 0)
        result.err.append(buf, size_t(r));
      else
        err_open = false;
    }
    if (in_i >= 0 && fds[in_i].revents) {
      const ssize_t w = ::write(in_fd, input.data() + written, input.size() - written);
      if (w > 0) written += size_t(w);
      if (w < 0 || written == input.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
  }
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  if (in_fd >= 0) ::close(in_fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string absolute_path(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (!real)
    throw InputError(path + ": cannot open job file: " + std::strerror(errno), kExitNoInput);
  std::string out = real;
  std::free(real);
  return out;
}

std::string stem_of(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const auto dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name;
}

std::string sbatch_job_id(const ProcessResult& r, const char* what) {
  if (r.exit_code != 0) {
    throw Error(std::string("sbatch (") + what + ") failed with exit code " +
                    std::to_string(r.exit_code) + ": " + trim(r.err.empty() ? r.out : r.err),
                r.exit_code == 127 ? kExitFailure : kExitFailure);
  }
  std::string id = trim(r.out);
  id = id.substr(0, id.find(';'));  // --parsable: "ID[;cluster]"
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw Error(std::string("sbatch (") + what + ") printed no job id: " + trim(r.out),
                kExitFailure);
  }
  return id;
}

// The state of a job from `scontrol show job -o ID`; empty when Slurm no longer knows it.
std::string job_state(const std::string& id) {
  const ProcessResult r = run_process({"scontrol", "show", "job", "-o", id}, "");
  if (r.exit_code != 0) return "";
  const auto at = r.out.find("JobState=");
  if (at == std::string::npos) return "";
  const auto end = r.out.find_first_of(" \n", at);
  return r.out.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
}

bool terminal_state(const std::string& s) {
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" ||
         s == "NODE_FAIL" || s == "OUT_OF_MEMORY" || s == "BOOT_FAIL" || s == "DEADLINE" ||
         s == "PREEMPTED" || s.empty();
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

SlurmScripts make_slurm_scripts(const FarmPlan& plan, const std::string& job_file_abs,
                                const SlurmOptions& o) {
  SlurmScripts s;
  s.job_file = job_file_abs;
  s.chunks = int64_t(plan.chunks.size());
  int gpus = o.gpus_per_task;
  if (gpus < 0) {
    gpus = 0;
    for (const JobSpec& job : plan.jobs) {
      if (job.devices != "cpu") gpus = 1;
    }
  }
  const std::string name = "wmbatch-" + stem_of(job_file_abs);
  auto common = [&](std::ostringstream& out, const std::string& job_name, const char* log_name) {
    out << "#SBATCH --job-name=" << job_name << "\n";
    out << "#SBATCH --ntasks=1\n";
    out << "#SBATCH --requeue\n";
    out << "#SBATCH --open-mode=append\n";
    if (!o.log_dir.empty()) out << "#SBATCH --output=" << o.log_dir << "/" << log_name << "\n";
    if (!o.partition.empty()) out << "#SBATCH --partition=" << o.partition << "\n";
    if (o.cpus_per_task > 0) out << "#SBATCH --cpus-per-task=" << o.cpus_per_task << "\n";
    if (!o.time_limit.empty()) out << "#SBATCH --time=" << o.time_limit << "\n";
    for (const std::string& arg : o.sbatch_args) out << "#SBATCH " << arg << "\n";
  };
  std::string farm_args;
  if (plan.chunk_frames != kDefaultChunkFrames) {
    farm_args = " --chunk-frames " + std::to_string(plan.chunk_frames);
  }

  std::ostringstream a;
  a << "#!/bin/bash\n";
  // Chunks that continue a causal model's state (reconstruct through a VAE: context_before > 0)
  // run one at a time, in order, so that each starts from the state its predecessor saved; run
  // at once, each would recompute every frame before it (n chunks: n(n+1)/2 chunks of work).
  // --max-parallel overrides.
  bool carried = false;
  for (const Chunk& c : plan.chunks)
    carried = carried || (!c.whole_input && c.range.context_before > 0);
  const int parallel = o.max_parallel > 0 ? o.max_parallel : carried ? 1 : 0;
  a << "#SBATCH --array=0-" << (s.chunks - 1);
  if (parallel > 0) a << "%" << parallel;
  a << "\n";
  common(a, name, "%x-%A_%a.out");
  if (gpus > 0) a << "#SBATCH --gpus-per-task=" << gpus << "\n";
  a << "#SBATCH --signal=B:USR1@" << o.signal_seconds << "\n";
  a << "# One chunk of " << job_file_abs << " per array task (wmbatch docs/farm.md).\n"
    << "# Exit codes: 0 done; 64/65/66/73 bad job, input or output: never retried; 75 "
       "interrupted:\n"
    << "# requeued when Slurm warned of the time limit (SIGUSR1); others: requeued up to "
    << o.max_retries << " times.\n"
    << "wmbatch=" << shell_quote(o.wmbatch) << "\n"
    << "job=" << shell_quote(job_file_abs) << "\n"
    << "task=\"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"\n"
    << "signalled=\n"
    << "pid=\n"
    << "# Ask wmbatch to stop at the next slice boundary. SIGUSR1 never escalates in wmbatch, so\n"
    << "# it does no harm when Slurm signalled wmbatch directly as well.\n"
    << "trap 'signalled=USR1; [ -n \"$pid\" ] && kill -USR1 \"$pid\" 2>/dev/null' USR1\n"
    << "trap 'signalled=TERM; [ -n \"$pid\" ] && kill -USR1 \"$pid\" 2>/dev/null' TERM INT\n"
    << "\"$wmbatch\" run \"$job\" --chunk \"$SLURM_ARRAY_TASK_ID\"" << farm_args
    << " --progress farm &\n"
    << "pid=$!\n"
    << "while :; do\n"
    << "  wait \"$pid\"; rc=$?\n"
    << "  kill -0 \"$pid\" 2>/dev/null || break  # still there: wait was cut short by a trap\n"
    << "done\n"
    << "case \"$rc\" in\n"
    << "  0) ;;\n"
    << "  75)\n"
    << "    if [ \"$signalled\" = USR1 ]; then\n"
    << "      echo \"wmbatch: $task interrupted before the time limit; requeueing it\"\n"
    << "      scontrol requeue \"$task\"\n"
    << "    fi ;;\n"
    << "  64|65|66|73) echo \"wmbatch: $task failed with exit code $rc; not retried\" ;;\n"
    << "  *)\n"
    << "    if [ -z \"$signalled\" ] && [ \"${SLURM_RESTART_COUNT:-0}\" -lt " << o.max_retries
    << " ]; then\n"
    << "      echo \"wmbatch: $task failed with exit code $rc; requeueing it\"\n"
    << "      scontrol requeue \"$task\"\n"
    << "    fi ;;\n"
    << "esac\n"
    << "exit \"$rc\"\n";
  s.array_script = a.str();

  std::ostringstream b;
  b << "#!/bin/bash\n";
  common(b, name + "-assemble", "%x-%j.out");
  b << "# Assembles the outputs of " << job_file_abs << " once every chunk is done (afterok).\n"
    << "exec " << shell_quote(o.wmbatch) << " assemble " << shell_quote(job_file_abs)
    << " --progress farm\n";
  s.assemble_script = b.str();
  return s;
}

int submit_slurm(const std::vector<std::string>& job_files, const SlurmOptions& options,
                 const std::atomic<bool>* cancel) {
  auto log = log::get("slurm");
  try {
    // Plan (and validate) every job file before submitting anything.
    FarmOptions farm;
    farm.chunk_frames = options.chunk_frames;
    std::vector<SlurmScripts> all;
    for (const std::string& file : job_files) {
      const std::string abs = absolute_path(file);
      const FarmPlan plan = plan_farm(abs, farm);
      all.push_back(make_slurm_scripts(plan, abs, options));
    }
    if (options.dry_run) {
      for (const SlurmScripts& s : all) {
        std::printf("# %s: %lld chunks\n# sbatch --parsable <<'EOF'\n%sEOF\n", s.job_file.c_str(),
                    static_cast<long long>(s.chunks), s.array_script.c_str());
        std::printf(
            "# sbatch --parsable --dependency=afterok:ARRAY_JOB_ID "
            "--kill-on-invalid-dep=yes <<'EOF'\n%sEOF\n",
            s.assemble_script.c_str());
      }
      std::fflush(stdout);
      return kExitOk;
    }
    std::vector<std::string> assemble_ids;
    for (const SlurmScripts& s : all) {
      const std::string array_id =
          sbatch_job_id(run_process({"sbatch", "--parsable"}, s.array_script), "array");
      const std::string assemble_id =
          sbatch_job_id(run_process({"sbatch", "--parsable", "--dependency=afterok:" + array_id,
                                     "--kill-on-invalid-dep=yes"},
                                    s.assemble_script),
                        "assemble");
      const nlohmann::json line = {{"job_file", s.job_file},
                                   {"chunks", s.chunks},
                                   {"array_job", array_id},
                                   {"assemble_job", assemble_id}};
      std::printf("%s\n", json_dump(line).c_str());
      std::fflush(stdout);
      log->info("{}: {} chunks: array job {}, assemble job {}", s.job_file, s.chunks, array_id,
                assemble_id);
      assemble_ids.push_back(assemble_id);
    }
    if (!options.wait) return kExitOk;
    int rc = kExitOk;
    for (const std::string& id : assemble_ids) {
      std::string state;
      for (;;) {
        state = job_state(id);
        if (terminal_state(state)) break;
        if (cancel && cancel->load()) throw Cancelled("stopped waiting for job " + id);
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      if (state == "COMPLETED") {
        log->info("assemble job {}: COMPLETED", id);
      } else {
        log->error("assemble job {}: {}", id, state.empty() ? "no longer known to Slurm" : state);
        if (rc == kExitOk) rc = kExitFailure;
      }
    }
    return rc;
  } catch (const Error& e) {
    log->error("{}", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    log->error("internal error: {}", e.what());
    return kExitSoftware;
  }
}

}  // namespace wm::sched
