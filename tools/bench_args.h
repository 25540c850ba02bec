// The command lines of the wmbench benchmarks: one table of flags per benchmark, each flag with
// its type, the variable it fills and that variable's value as its default, and the usage text
// drawn from the table.
//
// Rules every benchmark shares: `--help` (or `-h`) anywhere prints the usage on stdout and ends
// the process with 0, whatever else the line holds; an unknown flag, a flag without its value and
// a value of the wrong type or range are one line on stderr ("wmbench e2e: --crf: expected an
// integer >= 0, got 'x'") and exit 64. A flag that takes a value never takes a following `--flag`
// as that value (`--devices --ranks 2` is "--devices needs a value").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/model.h"

namespace wm::bench {

class Args {
 public:
  // `command`: "wmbench e2e"; `about`: the paragraph printed after the flags by --help.
  Args(std::string command, std::string about);

  // A flag with a value. `hint` names the value in the usage ("WxH", "fp16|bf16"); empty: the
  // default (the target's value now) stands for it, as in "[--crf 18]".
  Args& text(const std::string& flag, std::string* target, const std::string& hint = "");
  // An integer from `min` up (checked: the whole value, in range).
  Args& integer(const std::string& flag, int* target, int min, const std::string& hint = "");
  Args& integer(const std::string& flag, uint64_t* target, const std::string& hint = "");
  // A comma-separated list of integers, each from `min` up (replaces the default list).
  Args& integers(const std::string& flag, std::vector<int>* target, int min,
                 const std::string& hint = "N[,M...]");
  // A frame size "WxH" (checked, kept as text).
  Args& frame_size(const std::string& flag, std::string* target);
  // One of `allowed` (the usage shows them as "a|b|c").
  Args& choice(const std::string& flag, std::string* target, std::vector<std::string> allowed);
  // 0 or 1 (any integer >= 0; non-zero is true).
  Args& boolean(const std::string& flag, bool* target);
  // A flag without a value: sets `*target` to true.
  Args& toggle(const std::string& flag, bool* target);
  // A value read by `read`, which throws std::invalid_argument with the reason (the flag is
  // prefixed when the reason does not start with it).
  Args& custom(const std::string& flag, const std::string& hint,
               std::function<void(const std::string&)> read);

  // Leaves these flags out of the usage (still accepted: old command lines that pass them).
  Args& hide(const std::vector<std::string>& flags);

  // Reads argv[first, argc). Returns -1 when the benchmark should run, else the exit status to
  // return at once (0 after --help, 64 after a usage error, both already printed).
  int parse(int argc, char** argv, int first = 1) const;
  // True (the usage printed on stdout) when argv[first, argc) holds --help or -h.
  bool help(int argc, char** argv, int first = 1) const;
  // A usage error found after parse() (flags that do not fit together): prints
  // "COMMAND: WHY (COMMAND --help lists the options)" and returns 64.
  int fail(const std::string& why) const;
  // "usage: COMMAND [--flag X] ..." wrapped at 100 columns, then the about paragraph.
  std::string usage() const;

 private:
  struct Flag {
    std::string name, hint;
    bool takes_value = true;
    std::function<void(const std::string&)> read;
    bool hidden = false;
  };
  Args& add(Flag flag);

  std::string command_, about_;
  std::vector<Flag> flags_;
};

// Option values; each throws std::invalid_argument with a one-line reason naming `flag`.
// An integer >= min (the whole text).
int parse_int(const std::string& flag, const std::string& value, int min);
Device parse_device(const std::string& value);        // cpu | cuda | cuda:N (--device)
Precision parse_precision(const std::string& value);  // fp32 | bf16 | fp16 (--dtype)

// A frame size "WxH" (both >= 1), and a clip to make "WxH:N" (N frames or seconds, >= 1); else
// std::invalid_argument naming the flag.
struct FrameSize {
  int width = 0, height = 0;
};
FrameSize parse_size(const std::string& flag, const std::string& value);
struct ClipShape {
  int width = 0, height = 0, count = 0;
};
ClipShape parse_clip_shape(const std::string& flag, const std::string& value);

}  // namespace wm::bench
