#!/usr/bin/env bash
# GPU measurements of SeedVR2's DiT and whole upscale (issue 29). Builds nothing: expects
# build-gpu/ (tools/gpu-checks/build.sh; all.sh runs it, and the GPU tests, among them
# tests/unit/test_seedvr2_dit_gpu.cpp). Writes two files under $OUT: dit.json (one JSON object per
# line: each benchmark's result, and a line per step that failed or ran out of time) and dit.log
# (everything printed). Prints a summary table at the end.
#
#   OUT=... tools/gpu-checks/dit.sh [full]     (CHECKS=dit through tools/gpu-checks/all.sh)
#
# Every step runs under `timeout`, bounded by what is left of BUDGET_S (default 200 s; 540 s with
# `full`). Default: only our binaries — wmbench seedvr2-upscale, random weights of the official 3B
# shapes, bf16, 21 frames, at 720p and 1080p output (networks at 1072 × 1920, as the official
# crop), and 1080p with the budget capped at 16 GiB (blocks streamed from pinned host memory as
# needed): fps, per-stage seconds, peak GPU and host memory. `full` adds the 7B (in 24 GiB and
# all-resident), 45 frames and the GPU test. The official code runs only when SEEDVR_REPO names a
# checkout of ByteDance-Seed/SeedVR carried into the tree (the GPU host has no network; its Python
# needs — omegaconf with antlr4-python3-runtime, diffusers, rotary-embedding-torch 0.5.3 — carried
# as wheels in .whl/): tools/bench/seedvr2_official.py on the same shapes.
set -u
OUT=${OUT:?set OUT}
mode=${1:-}
if [ "$mode" = full ]; then BUDGET_S=${BUDGET_S:-540}; else BUDGET_S=${BUDGET_S:-200}; fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JSON=$OUT/dit.json
LOG=$OUT/dit.log
: >"$JSON"
: >"$LOG"
B=build-gpu
deadline=$((SECONDS + BUDGET_S))
STEP=$(mktemp)
trap 'rm -f "$STEP"' EXIT

say() { echo "== $* (at ${SECONDS}s)" | tee -a "$LOG"; }
# bench LIMIT CMD...: runs CMD under timeout (LIMIT seconds, or what is left of the budget); the
# JSON lines it prints go to dit.json, everything to dit.log. A failure or timeout is a JSON line.
bench() {
  local limit=$1 left rc
  shift
  left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    say "skipped (budget spent): $*"
    echo "{\"skipped\": \"$*\"}" >>"$JSON"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "timeout ${limit}s: $*"
  timeout -k 5 "$limit" "$@" >"$STEP" 2>>"$LOG"
  rc=$?
  cat "$STEP" >>"$LOG"
  grep '^{' "$STEP" >>"$JSON"
  : >"$STEP"
  if [ "$rc" != 0 ]; then
    echo "{\"failed\": \"$*\", \"exit\": $rc}" >>"$JSON"
    say "exit $rc"
  fi
}

if [ ! -x "$B/wmbench" ]; then
  say "no $B/wmbench: run tools/gpu-checks/build.sh first"
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader >>"$LOG" 2>&1

W="$B/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --warmup 1 --iters 2 --frames 21"
bench 75 $W --model 3b --height 720 --width 1280
bench 75 $W --model 3b --height 1080 --width 1920
bench 75 $W --model 3b --height 1080 --width 1920 --max-gpu-gib 16
if [ "$mode" = full ]; then
  bench 120 $W --model 7b --height 1080 --width 1920 --max-gpu-gib 24 --iters 1
  bench 120 $W --model 7b --height 1080 --width 1920 --iters 1
  W45="$B/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --warmup 1 --iters 1 --frames 45"
  bench 90 $W45 --model 3b --height 720 --width 1280
  bench 90 $W45 --model 3b --height 1080 --width 1920
  if [ -x "$B/tests/test_seedvr2_dit_gpu" ]; then
    bench 120 "$B/tests/test_seedvr2_dit_gpu" --gtest_brief=1
  fi
fi

# The official code, same shapes (only with a checkout): the DiT without the script's offload to
# the CPU during the decode (its stage is then the DiT's own time).
if [ -n "${SEEDVR_REPO:-}" ] && [ -d "$SEEDVR_REPO" ]; then
  if [ -d .whl ]; then
    timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/site
  fi
  O="python3 tools/bench/seedvr2_official.py --repo $SEEDVR_REPO --warmup 1 --iters 2 --frames 21"
  bench 120 $O --model 3b --height 720 --width 1280 --dit-offload 0
  bench 120 $O --model 3b --height 1072 --width 1920 --dit-offload 0
  if [ "$mode" = full ]; then
    bench 120 $O --model 3b --height 720 --width 1280 --dit-offload 0 --compile 1
  fi
else
  say "official side-by-side skipped: SEEDVR_REPO not set"
fi

say "summary"
if command -v python3 >/dev/null; then
  python3 - "$JSON" <<'EOF' | tee -a "$LOG"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'what':<34}{'fps':>7}{'enc s':>8}{'dit s':>8}{'dec s':>8}{'fix s':>8}{'gpu GiB':>9}{'rss MiB':>9}")
for r in rows:
    if 'failed' in r or 'skipped' in r:
        print(f"{'FAILED exit ' + str(r['exit']) if 'failed' in r else 'SKIPPED'}: {r.get('failed', r.get('skipped'))}")
        continue
    if 'fps' not in r:
        continue
    what = f"{r.get('bench','?')} {r.get('model','')} {r.get('height')}x{r.get('width')} f{r.get('frames')}"
    if r.get('max_gpu_gib'):
        what += f" cap{r['max_gpu_gib']}"
    g = r.get('peak_gpu_gib')
    print(f"{what:<34}{r['fps']:7.2f}{r.get('encode_seconds', 0):8.3f}{r.get('dit_seconds', 0):8.3f}"
          f"{r.get('decode_seconds', 0):8.3f}{r.get('color_fix_seconds', 0):8.3f}"
          f"{(g if g is not None else float('nan')):9.1f}{r.get('peak_rss_mib', 0):9.0f}")
EOF
else
  cat "$JSON"
fi
say done
