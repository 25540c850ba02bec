#!/usr/bin/env bash
# A run that gives no result (issue 28: Wan2.1 1080p ranks with cuDNN's search on, stop 46),
# after build-gpu/: runs the command in the background, samples the GPUs every 5 s (busy and
# memory: a search keeps a GPU busy, a stall leaves it idle), and when it is still running after
# STALL_WAIT_S seconds dumps every thread's stack (stacks.sh) and kills it. Usage: OUT=dir [STALL_WAIT_S=60] bash tools/gpu-checks/stall.sh [COMMAND...]
# (default: the 1080p two-rank decode on GPU 0). Writes $OUT/stall.log.
set -u
: "${OUT:?set OUT}"
source "$(dirname "$0")/stacks.sh"
mkdir -p "$OUT"
LOG=$OUT/stall.log
: >"$LOG"
if [ -d /opt/wm-deps ]; then
  export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_NVLS_ENABLE=0
wait_s=${STALL_WAIT_S:-60}
if [ $# -eq 0 ]; then
  set -- build-gpu/wmbench vae-decode --dim 96 --device cuda:0 --dtype bf16 --latent-frames 21 \
    --height 1080 --width 1920 --slice-frames 8 --warmup 1 --iters 1 --devices 0 --ranks 2 \
    --scaling 0
fi
echo "=== $*" >>"$LOG"
"$@" >"$OUT/stall.json" 2>>"$LOG" &
pid=$!
for ((i = 0; i < wait_s; ++i)); do
  kill -0 "$pid" 2>/dev/null || break
  if ((i % 5 == 0)); then
    echo "--- ${i}s: $(nvidia-smi --query-gpu=index,utilization.gpu,memory.used \
      --format=csv,noheader 2>/dev/null | tr '\n' ' ')" >>"$LOG"
  fi
  sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "=== still running after ${wait_s}s; stacks:" >>"$LOG"
  dump_stacks "$pid" "$LOG"
  kill -9 "$pid"
fi
wait "$pid"
echo "=== exit $?" >>"$LOG"
tail -5 "$LOG"
