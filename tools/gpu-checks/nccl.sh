#!/usr/bin/env bash
# The NCCL exchange's hang (issue 28/30), on a host with two or more GPUs, after build-gpu/:
# runs the two-GPU NCCL tests under CUDA's eager module loading (NCCL_MODES="LAZY EAGER" to
# compare); a run still going after NCCL_WAIT_S seconds gets every thread's stack dumped (gdb or
# eu-stack, when present) and is killed. Writes $OUT/nccl.log.
set -u
: "${OUT:?set OUT}"
source "$(dirname "$0")/stacks.sh"
LOG=$OUT/nccl.log
: >"$LOG"
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
if [ -d /opt/wm-deps ]; then
  export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# Past the tests' own 60 s exchange timeout: a failed run first logs what its ranks queued and
# did not match (the nccl warning), then the stacks show where the abort itself waits.
wait_s=${NCCL_WAIT_S:-75}
echo "gdb: $(command -v gdb) cuda-gdb: $(command -v cuda-gdb) eu-stack: $(command -v eu-stack)" >>"$LOG"
# EAGER: as wmbatch runs a process that exchanges over NCCL (parallel/halo_nccl.h); under LAZY
# the groups exchange in-process, with a warning.
for mode in ${NCCL_MODES:-EAGER}; do
  for t in ${NCCL_TESTS:-"test_sequence_parallel_multigpu:*OverNccl*" "test_seedvr2_vae_multigpu:*"}; do
    bin=build-gpu/tests/${t%%:*}
    echo "=== $mode $t" >>"$LOG"
    CUDA_MODULE_LOADING=$mode "$bin" --gtest_filter="${t#*:}" >>"$LOG" 2>&1 &
    pid=$!
    for _ in $(seq "$wait_s"); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "=== $mode $t: still running after ${wait_s}s; stacks:" >>"$LOG"
      dump_stacks "$pid" "$LOG"
      kill -9 "$pid"
    fi
    wait "$pid"
    echo "=== $mode $t: exit $?" >>"$LOG"
  done
done
