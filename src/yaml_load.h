// YAML::LoadAll with a guard against yaml-cpp 0.7's endless loop (Debian 12's version): a stray
// token that no rule consumes (a top-level `,`, e.g. "task: upscale\n," or just ",") makes LoadAll
// start the same empty document forever, allocating as it goes, until memory runs out
// (yaml-cpp issue #1040, fixed upstream after 0.8). Found by fuzzing the job parser.
#pragma once

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace wm {

// The documents of `text`, as YAML::LoadAll returns them. Throws YAML::ParserException (at the
// offending token) where yaml-cpp would loop, and whatever LoadAll throws otherwise.
std::vector<YAML::Node> load_yaml_documents(const std::string& text);

}  // namespace wm
