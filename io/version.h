// Versions of the libav libraries wmbatch runs with (for --version and reports).
#pragma once

#include <string>

namespace wm::io {
std::string libav_versions();
}
