// The `wmbatch watch` and `wmbatch status` subcommands: their command lines (CLI11) and help,
// kept beside the daemon so that tools/wmbatch.cpp only dispatches to them.
#pragma once

namespace wm::watch {

// argv[0] is the subcommand's name. Return the process exit code.
int main_watch(int argc, char** argv);
int main_status(int argc, char** argv);

}  // namespace wm::watch
