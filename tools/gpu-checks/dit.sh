#!/usr/bin/env bash
# GPU measurements of SeedVR2's DiT and whole upscale (issue 29). Builds nothing: expects
# build-gpu/ (tools/gpu-checks/build.sh; all.sh runs it, and the GPU tests, among them
# tests/unit/test_seedvr2_dit_gpu.cpp). Writes two files under $OUT: dit.json (one JSON object per
# line: each benchmark's result) and dit.log (everything printed).
#
#   OUT=... tools/gpu-checks/dit.sh [full]     (CHECKS=dit through tools/gpu-checks/all.sh)
#
# Default (~4 min on an H200): wmbench seedvr2-upscale, random weights of the official shapes,
# bf16, 21 frames: the 3B at 720p and 1080p (networks at 1072 × 1920, as the official crop), the 3B
# at 1080p in 16 GiB and the 7B at 1080p in 24 GiB (blocks streamed from pinned host memory as
# needed). `full` adds 45 frames, the 7B all-resident and the GPU test's properties. With
# SEEDVR_REPO=<a checkout of ByteDance-Seed/SeedVR carried into the tree> and its Python needs
# importable (omegaconf with antlr4-python3-runtime, diffusers, rotary-embedding-torch 0.5.3:
# carried as wheels in .whl/, per the device README), tools/bench/seedvr2_official.py runs the
# official code on the same shapes afterwards.
set -u
OUT=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JSON=$OUT/dit.json
LOG=$OUT/dit.log
: >"$JSON"
: >"$LOG"
B=build-gpu
mode=${1:-}

say() { echo "== $* (at ${SECONDS}s)" | tee -a "$LOG"; }
# Runs a command; the JSON lines it prints go to dit.json, everything to dit.log.
bench() {
  say "$*"
  "$@" 2>>"$LOG" | tee -a "$LOG" | grep '^{' >>"$JSON"
}

W="$B/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --warmup 1 --iters 2 --frames 21"
bench $W --model 3b --height 720 --width 1280
bench $W --model 3b --height 1080 --width 1920
bench $W --model 3b --height 1080 --width 1920 --max-gpu-gib 16
bench $W --model 7b --height 1080 --width 1920 --max-gpu-gib 24 --iters 1
if [ "$mode" = full ]; then
  bench $W --model 7b --height 1080 --width 1920 --iters 1
  bench $W --model 7b --height 720 --width 1280 --iters 1
  W45="$B/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --warmup 1 --iters 1 --frames 45"
  bench $W45 --model 3b --height 720 --width 1280
  bench $W45 --model 3b --height 1080 --width 1920
  say "GPU test"
  "$B/tests/test_seedvr2_dit_gpu" --gtest_output=json:"$OUT/gtest.json" >>"$LOG" 2>&1
  echo "{\"gpu_test_exit\": $?}" >>"$JSON"
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' \
    "$OUT/gtest.json" >>"$JSON" 2>>"$LOG"
  rm -f "$OUT/gtest.json"
fi

# The official code, same shapes: the DiT without the script's offload to the CPU during the
# decode (its stage is then the DiT's own time), then as the script runs it.
if [ -n "${SEEDVR_REPO:-}" ] && [ -d "$SEEDVR_REPO" ]; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
  fi
  O="python3 tools/bench/seedvr2_official.py --repo $SEEDVR_REPO --warmup 1 --iters 2 --frames 21"
  bench $O --model 3b --height 720 --width 1280 --dit-offload 0
  bench $O --model 3b --height 1072 --width 1920 --dit-offload 0
  if [ "$mode" = full ]; then
    bench $O --model 3b --height 720 --width 1280 --dit-offload 1
    bench $O --model 3b --height 720 --width 1280 --dit-offload 0 --compile 1
  fi
else
  say "official side-by-side skipped: SEEDVR_REPO not set"
fi
say done
