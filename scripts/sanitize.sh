#!/usr/bin/env bash
# Builds the unit tests that need no LibTorch with AddressSanitizer + UBSan (WMBATCH_SANITIZE=ON;
# clang, -O1) into build-asan/ and runs them (CTest label `sanitize`, tests named sanitize.*): a
# leak, an out-of-bounds access or undefined behaviour fails the test that hit it. Which tests and
# why: tests/sanitize.cmake; the cost: docs/testing.md. Arguments go to ctest (default:
# -L sanitize), e.g. scripts/sanitize.sh -L sanitize -R JobSpec.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
wm_install "${WM_FUZZ_PACKAGES[@]}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitize.supp:print_suppressions=0}"
# A build-asan/ configured with another compiler: CMake would drop the options below with its
# cache, so start afresh.
if [ -f build-asan/CMakeCache.txt ] &&
   ! { grep -qx 'CMAKE_CXX_COMPILER:[A-Z]*=clang++' build-asan/CMakeCache.txt &&
       grep -qx 'CMAKE_C_COMPILER:[A-Z]*=clang' build-asan/CMakeCache.txt; }; then
  rm -rf build-asan
fi
# -O1 -g1: ASan's advice (fast enough, exact reports), line numbers at a fraction of full debug
# info's build time. clang: about half gcc's compile time under the sanitizers here.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1 -DNDEBUG" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DWMBATCH_SANITIZE=ON -DWMBATCH_BUILD_TESTS=ON >/dev/null
# The build runs each test program once (gtest_discover_tests), with the options above.
cmake --build build-asan --target sanitize_tests -j"$(nproc)"
cd build-asan
[ $# -eq 0 ] && set -- -L sanitize
ctest --output-on-failure -j"$(nproc)" --timeout 1200 "$@"
