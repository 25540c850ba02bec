#!/usr/bin/env bash
# GPU checks and measurements of SeedVR2's DiT and whole upscale (issue 29). Builds nothing:
# expects build-gpu/ with the targets test_seedvr2_dit_gpu and wmbench (tools/gpu-checks/
# build.sh test_seedvr2_dit_gpu wmbench). Writes two files under $OUT: dit.json (one JSON
# object per line: the GPU test's results, then each benchmark) and dit.log (everything printed).
#
# The official code's side-by-side runs when SEEDVR_REPO names a checkout of ByteDance-Seed/SeedVR
# and its Python needs are importable (omegaconf, diffusers, rotary-embedding-torch 0.5.3: carry
# them as wheels, .whl/, per the device README); skipped otherwise, and the log says so.
#
# Usage: OUT=... [SEEDVR_REPO=...] tools/gpu-checks/dit.sh [quick]   (quick: the tests and the 3B
# at 720p only)
set -u
OUT=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JSON=$OUT/dit.json
LOG=$OUT/dit.log
: >"$JSON"
: >"$LOG"
B=build-gpu
quick=${1:-}

say() { echo "== $*" | tee -a "$LOG"; }
# Runs a command; its stdout's JSON lines go to dit.json, everything to dit.log.
bench() {
  say "$*"
  "$@" 2>>"$LOG" | tee -a "$LOG" | grep '^{' >>"$JSON"
}

say "GPU test: tests/unit/test_seedvr2_dit_gpu.cpp"
"$B/tests/test_seedvr2_dit_gpu" --gtest_output=json:"$OUT/gtest.json" >>"$LOG" 2>&1
echo "{\"gpu_test_exit\": $?}" >>"$JSON"
if [ -f "$OUT/gtest.json" ]; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d))' \
    "$OUT/gtest.json" >>"$JSON" 2>>"$LOG"
  rm -f "$OUT/gtest.json"
fi

W="$B/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --warmup 1 --iters 2"
# 720p and 1080p outputs (1080p runs the networks at 1072 × 1920, as the official crop), 21 frames.
bench $W --model 3b --frames 21 --height 720 --width 1280
if [ "$quick" != quick ]; then
  bench $W --model 3b --frames 21 --height 1080 --width 1920
  bench $W --model 3b --frames 45 --height 720 --width 1280
  # Small GPUs: the 3B at 1080p in 16 GiB, the 7B in 24 GiB (blocks streamed as needed).
  bench $W --model 3b --frames 21 --height 1080 --width 1920 --max-gpu-gib 16
  bench $W --model 7b --frames 21 --height 720 --width 1280
  bench $W --model 7b --frames 21 --height 1080 --width 1920
  bench $W --model 7b --frames 21 --height 1080 --width 1920 --max-gpu-gib 24
fi

# The official code, same shapes (the DiT without its offload to the CPU during the decode, so
# that its stage is the DiT's own time; then as the script runs it).
if [ -n "${SEEDVR_REPO:-}" ] && [ -d "$SEEDVR_REPO" ]; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
  fi
  O="python3 tools/bench/seedvr2_official.py --repo $SEEDVR_REPO --warmup 1 --iters 2"
  bench $O --model 3b --frames 21 --height 720 --width 1280 --dit-offload 0
  if [ "$quick" != quick ]; then
    bench $O --model 3b --frames 21 --height 1072 --width 1920 --dit-offload 0
    bench $O --model 3b --frames 21 --height 720 --width 1280 --dit-offload 1
    bench $O --model 3b --frames 21 --height 720 --width 1280 --dit-offload 0 --compile 1
  fi
else
  say "official side-by-side skipped: SEEDVR_REPO not set"
fi
say done
