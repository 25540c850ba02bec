#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer + UBSan (WMBATCH_SANITIZE=ON) into build-sanitize/
# and runs them: a leak, an out-of-bounds access or undefined behaviour fails the test that hit it.
# Arguments go to ctest (default: -L unit), e.g. scripts/sanitize.sh -L unit -R JobSpec.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
wm_install
# -g1: line numbers in the reports, at a fraction of full debug info's build time.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 \
  -DWMBATCH_SANITIZE=ON -DWMBATCH_BUILD_TESTS=ON >/dev/null
cmake --build build-sanitize --target unit_tests -j"$(nproc)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize.supp:print_suppressions=0}"
cd build-sanitize
[ $# -eq 0 ] && set -- -L unit
ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
