// The one error family of wmbatch. Every failure that reaches a job boundary is a wm::Error whose
// exit_code() is the process exit status documented in docs/exit-codes.md. Exceptions stay inside
// a job: the runner turns them into a job state, a log line and an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace wm {

// Exit statuses (sysexits.h numbering, so shells and farm managers can tell them apart).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // some job failed for a reason not listed below
  kExitUsage = 64,        // bad command line
  kExitDataErr = 65,      // bad job file, bad model config or weights, corrupt or unusable input
  kExitNoInput = 66,      // input file missing or unreadable
  kExitUnavailable = 69,  // taken: another `wmbatch watch` runs on the same queue
  kExitSoftware = 70,     // internal error (a bug)
  kExitCantCreat = 73,  // output cannot be created (folder unwritable, exists with on_exists: fail)
  kExitIoErr = 74,      // write failed (disk full, I/O error)
  kExitTempFail = 75,   // interrupted; rerunning resumes
};

// `text` as one printable line: newlines and other control characters (which error messages
// may quote from a job file or a file header) written as \n, \xNN; tabs and UTF-8 kept.
inline std::string one_line(const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 0x20 && u != 0x7f) || c == '\t') {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A libav call failed. Keeps the AVERROR code and the name of the call.
class AvError : public Error {
 public:
  AvError(const std::string& message, int av_code, std::string call, int exit_code = kExitDataErr)
      : Error(message, exit_code), av_code_(av_code), call_(std::move(call)) {}
  int av_code() const { return av_code_; }
  const std::string& call() const { return call_; }

 private:
  int av_code_;
  std::string call_;
};

// A job file or option is invalid. what() is "FILE:LINE: KEY: problem". Exit 65, or the code
// given (66 for a file the key names that is missing, such as model.weights).
class ConfigError : public Error {
 public:
  ConfigError(const std::string& file, int line, const std::string& key, const std::string& problem,
              int exit_code = kExitDataErr)
      : Error(format(file, line, key, problem), exit_code), file_(file), line_(line), key_(key) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& key() const { return key_; }

 private:
  static std::string format(const std::string& file, int line, const std::string& key,
                            const std::string& problem) {
    std::string out = file;
    if (line > 0) out += ":" + std::to_string(line);
    out += ": ";
    if (!key.empty()) out += key + ": ";
    return one_line(out + problem);
  }

  std::string file_;
  int line_;
  std::string key_;
};

// A model cannot be built or run: bad weights, wrong shapes, a c10::Error from LibTorch.
class ModelError : public Error {
 public:
  explicit ModelError(const std::string& message, int exit_code = kExitDataErr)
      : Error(message, exit_code) {}
};

// An input is missing, unreadable, corrupt or unusable (no video stream, truncated).
class InputError : public Error {
 public:
  InputError(const std::string& message, int exit_code = kExitDataErr)
      : Error(message, exit_code) {}
};

// An output cannot be created or written (unwritable folder, disk full).
class OutputError : public Error {
 public:
  OutputError(const std::string& message, int exit_code = kExitIoErr) : Error(message, exit_code) {}
};

// Work was stopped on request (signal or cancellation); the journal allows a resume.
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& message = "cancelled") : Error(message, kExitTempFail) {}
};

}  // namespace wm
