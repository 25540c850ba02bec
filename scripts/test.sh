#!/usr/bin/env bash
# Installs what is missing, builds with tests, and runs the whole suite with CTest.
# Extra arguments go to ctest (e.g. -L unit, -LE slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
wm_install
wm_build -DWMBATCH_BUILD_TESTS=ON
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
