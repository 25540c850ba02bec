#include "tools/bench_args.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "src/base/error.h"

namespace wm::bench {

int parse_int(const std::string& flag, const std::string& value, int min) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || used == 0 || x < min) {
    throw std::invalid_argument(flag + ": expected an integer >= " + std::to_string(min) +
                                ", got '" + value + "'");
  }
  return x;
}

Device parse_device(const std::string& value) {
  Device d;
  if (value == "cpu") return d;
  if (value == "cuda") {
    d.kind = Device::Kind::kCuda;
    return d;
  }
  if (value.rfind("cuda:", 0) == 0) {
    d.kind = Device::Kind::kCuda;
    d.index = parse_int("--device", value.substr(5), 0);
    return d;
  }
  throw std::invalid_argument("--device: expected cpu or cuda:N, got '" + value + "'");
}

Precision parse_precision(const std::string& value) {
  if (value == "fp32") return Precision::kFloat32;
  if (value == "bf16") return Precision::kBFloat16;
  if (value == "fp16") return Precision::kFloat16;
  throw std::invalid_argument("--dtype: expected fp32, bf16 or fp16, got '" + value + "'");
}

FrameSize parse_size(const std::string& flag, const std::string& value) {
  const size_t x = value.find('x');
  if (x == std::string::npos) {
    throw std::invalid_argument(flag + ": expected WxH, got '" + value + "'");
  }
  return {parse_int(flag, value.substr(0, x), 1), parse_int(flag, value.substr(x + 1), 1)};
}

ClipShape parse_clip_shape(const std::string& flag, const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument(flag + ": expected WxH:N, got '" + value + "'");
  }
  const FrameSize size = parse_size(flag, value.substr(0, colon));
  return {size.width, size.height, parse_int(flag, value.substr(colon + 1), 1)};
}

Args::Args(std::string command, std::string about)
    : command_(std::move(command)), about_(std::move(about)) {}

Args& Args::add(Flag flag) {
  flags_.push_back(std::move(flag));
  return *this;
}

Args& Args::text(const std::string& flag, std::string* target, const std::string& hint) {
  return add({flag,
              !hint.empty()      ? hint
              : !target->empty() ? *target
                                 : "VALUE",
              true, [target](const std::string& v) { *target = v; }});
}

Args& Args::integer(const std::string& flag, int* target, int min, const std::string& hint) {
  return add({flag, hint.empty() ? std::to_string(*target) : hint, true,
              [flag, target, min](const std::string& v) { *target = parse_int(flag, v, min); }});
}

Args& Args::integer(const std::string& flag, uint64_t* target, const std::string& hint) {
  return add({flag, hint.empty() ? std::to_string(*target) : hint, true,
              [flag, target](const std::string& v) { *target = uint64_t(parse_int(flag, v, 0)); }});
}

Args& Args::integers(const std::string& flag, std::vector<int>* target, int min,
                     const std::string& hint) {
  return add({flag, hint, true, [flag, target, min](const std::string& v) {
                target->clear();
                std::stringstream in(v);
                for (std::string item; std::getline(in, item, ',');) {
                  target->push_back(parse_int(flag, item, min));
                }
              }});
}

Args& Args::frame_size(const std::string& flag, std::string* target) {
  return add({flag, "WxH", true, [flag, target](const std::string& v) {
                parse_size(flag, v);
                *target = v;
              }});
}

Args& Args::choice(const std::string& flag, std::string* target, std::vector<std::string> allowed) {
  std::string hint;
  for (const std::string& a : allowed) hint += (hint.empty() ? "" : "|") + a;
  return add({flag, hint, true, [flag, target, allowed, hint](const std::string& v) {
                for (const std::string& a : allowed) {
                  if (v == a) {
                    *target = v;
                    return;
                  }
                }
                throw std::invalid_argument(flag + ": expected " + hint + ", got '" + v + "'");
              }});
}

Args& Args::boolean(const std::string& flag, bool* target) {
  return add({flag, "0|1", true,
              [flag, target](const std::string& v) { *target = parse_int(flag, v, 0) != 0; }});
}

Args& Args::toggle(const std::string& flag, bool* target) {
  return add({flag, "", false, [target](const std::string&) { *target = true; }});
}

Args& Args::custom(const std::string& flag, const std::string& hint,
                   std::function<void(const std::string&)> read) {
  return add({flag, hint, true, std::move(read)});
}

Args& Args::hide(const std::vector<std::string>& flags) {
  for (Flag& f : flags_) {
    for (const std::string& name : flags) f.hidden = f.hidden || f.name == name;
  }
  return *this;
}

bool Args::help(int argc, char** argv, int first) const {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage().c_str(), stdout);
      return true;
    }
  }
  return false;
}

int Args::parse(int argc, char** argv, int first) const {
  if (help(argc, argv, first)) return 0;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    const Flag* flag = nullptr;
    for (const Flag& f : flags_) {
      if (f.name == a) flag = &f;
    }
    if (!flag) return fail("unknown option '" + a + "'");
    std::string value;
    if (flag->takes_value) {
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
        return fail(a + " needs a value" +
                    (i + 1 < argc ? " (got the option " + std::string(argv[i + 1]) + ")" : ""));
      }
      value = argv[++i];
    }
    try {
      flag->read(value);
    } catch (const std::invalid_argument& e) {
      const std::string why = e.what();
      return fail(why.rfind(a, 0) == 0 ? why : a + ": " + why);
    }
  }
  return -1;
}

int Args::fail(const std::string& why) const {
  std::fprintf(stderr, "%s: %s (%s --help lists the options)\n", command_.c_str(), why.c_str(),
               command_.c_str());
  return kExitUsage;
}

std::string Args::usage() const {
  std::string out = "usage: " + command_;
  const size_t indent = out.size();
  size_t column = out.size();
  for (const Flag& f : flags_) {
    if (f.hidden) continue;
    const std::string item = "[" + f.name + (f.takes_value ? " " + f.hint : "") + "]";
    if (column + 1 + item.size() > 100) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    }
    out += " " + item;
    column += 1 + item.size();
  }
  out += "\n" + about_;
  if (!about_.empty() && about_.back() != '\n') out += "\n";
  return out;
}

}  // namespace wm::bench
