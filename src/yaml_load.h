// YAML::LoadAll with a guard against yaml-cpp 0.7's endless loop (Debian 12's version): a stray
// token that no rule consumes (a top-level `,`, e.g. "task: upscale\n," or just ",") makes LoadAll
// start the same empty document forever, allocating as it goes, until memory runs out
// (yaml-cpp issue #1040, fixed upstream after 0.8). Found by fuzzing the job parser.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

namespace wm {

// The documents of `text`, as YAML::LoadAll returns them. Throws YAML::ParserException (at the
// offending token) where yaml-cpp would loop, and whatever LoadAll throws otherwise.
std::vector<YAML::Node> load_yaml_documents(const std::string& text);

// Scalars as the job parser and WATCH.yaml's read them (one reading for both, issue 27): a plain
// scalar (not quoted with a `!` tag), its whole text, in the C locale; nullopt for anything else.
// A finite number ("2", "0.5", "1e3"; not "nan", "inf", "1 s", "0x10").
std::optional<double> yaml_number(const YAML::Node& node);
// A decimal integer with an optional sign ("12", "-3"; not "1.0", "1e3", "+", "")
std::optional<long long> yaml_integer(const YAML::Node& node);
// YAML 1.2's booleans as yaml-cpp reads them (true/false, yes/no, on/off, any case)
std::optional<bool> yaml_flag(const YAML::Node& node);

}  // namespace wm
