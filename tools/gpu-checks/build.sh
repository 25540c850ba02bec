#!/usr/bin/env bash
# Builds wmbatch on the offline GPU host (../shared/gpu-host/README.md) into build-gpu/.
# Expects the dependency bundle at .deps/wm-deps.tar.xz (carried by the device tool).
# Usage: source tools/gpu-checks/build.sh [targets...]   (sets PATH-like variables for the caller)
# WM_SRC / WM_BUILD: another source tree and build folder (default . and build-gpu);
# WM_CMAKE_ARGS: more configure options (e.g. -DWMBATCH_BUILD_TESTS=OFF for a tree without tests).
set -u
if [ ! -d /opt/wm-deps ]; then
  tar -C / -xJf .deps/wm-deps.tar.xz || return 1 2>/dev/null || exit 1
fi
export PKG_CONFIG_PATH=/opt/wm-deps/lib/pkgconfig
export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCH_CMAKE=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
wm_build=${WM_BUILD:-build-gpu}
if [ ! -f "$wm_build/build.ninja" ]; then
  cmake -S "${WM_SRC:-.}" -B "$wm_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="/opt/wm-deps/usr;$TORCH_CMAKE" -DTORCH_CUDA_ARCH_LIST=9.0a \
    ${WM_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$wm_build" -j"$(nproc)" ${*:+--target "$@"}
