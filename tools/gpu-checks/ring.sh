#!/usr/bin/env bash
# GPU measurements of issue 28 (the time split as a ring, every rank on the tuned path, SeedVR2's
# time split, the scaling model) for the lead's GPU run. Builds nothing: build-gpu/wmbench must
# exist (tools/gpu-checks/build.sh wmbench). The GPU tests of the splits run under all.sh
# (ctest -L gpu / multigpu), not here.
#
# Usage: OUT=dir tools/gpu-checks/ring.sh        (or CHECKS=ring tools/gpu-checks/all.sh)
# Uses every GPU `nvidia-smi -L` lists. One GPU: the one-rank baseline and two in-process ranks
# sharing it (Wan2.1 720p, SeedVR2 720p), each with the scaling model's per-rank table and its
# prediction for 2 and 4 GPUs of their own. Two or more: a rank per GPU, in-process and NCCL.
# Every step runs under `timeout`; about 150 s in all (estimated, not measured).
# Writes $OUT/ring.jsonl (one JSON object per step: name, command, exit code, seconds, and
# wmbench's own JSON as "result") and $OUT/ring.log (the steps' stderr).
set -u
: "${OUT:?set OUT}"
mkdir -p "$OUT"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
JSONL=$OUT/ring.jsonl
LOG=$OUT/ring.log
: >"$JSONL"
: >"$LOG"
if [ -d /opt/wm-deps ]; then
  export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=build-gpu/wmbench
if [ ! -x "$B" ]; then
  echo "{\"name\": \"setup\", \"exit_code\": 2, \"result\": \"$B missing (build-gpu/ first)\"}" >>"$JSONL"
  exit 2
fi
if [ "$GPUS" -lt 1 ]; then
  echo '{"name": "setup", "exit_code": 2, "result": "nvidia-smi lists no GPU"}' >>"$JSONL"
  exit 2
fi
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

# run NAME LIMIT COMMAND...: runs it under timeout (stdout: its JSON), appends one line to $JSONL.
run() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" >>"$LOG"
  local start end rc
  start=$(date +%s.%N)
  timeout "$limit" "$@" >"$TMP" 2>>"$LOG"
  rc=$?
  end=$(date +%s.%N)
  python3 - "$name" "$rc" "$start" "$end" "$TMP" "$*" "$GPUS" >>"$JSONL" <<'EOF'
import json, sys
name, rc, start, end, path, cmd, gpus = sys.argv[1:8]
text = open(path).read().strip()
result = None
for candidate in (text, text.splitlines()[-1] if text else ""):
    try:
        result = json.loads(candidate)
        break
    except ValueError:
        result = text[-2000:] if text else None
print(json.dumps({"name": name, "gpus": int(gpus), "command": cmd, "exit_code": int(rc),
                  "timed_out": int(rc) in (124, 137),
                  "seconds": round(float(end) - float(start), 2), "result": result}))
EOF
  echo "=== $name: exit $rc" >>"$LOG"
}

D="--dim 96 --device cuda:0 --dtype bf16"
S="--device cuda:0 --dtype bf16"

if [ "$GPUS" -eq 1 ]; then
  # One GPU: one rank against two ranks sharing it (issue 28's floor: >= 0.92x, goal 0.97x),
  # 81 frames in slices of 8 latent frames (the ring over 3 slices), with the scaling model.
  run wan_720p_81_1gpu 70 $B vae-decode $D --latent-frames 21 --height 720 --width 1280 \
    --slice-frames 8 --warmup 1 --iters 1 --devices 0 --ranks 2
  # SeedVR2 decode, the same (floor >= 0.9x).
  run seedvr2_720p_1gpu 50 $B seedvr2 decode $S --height 720 --width 1280 --warmup 1 --iters 1 \
    --devices 0 --ranks 2
  # Cliff or stall: the row split of one whole 21-latent 720p slice (gave nothing in 120 s once).
  run spatial_whole_slice_720p_1gpu 30 $B vae-decode $D --iters 1 --warmup 0 --latent-frames 21 \
    --height 720 --width 1280 --devices 0 --ranks 2 --parallel spatial --scaling 0
else
  # A rank per GPU: time split and row split in-process (peer copies), then the time split
  # over NCCL, then SeedVR2; on 2 GPUs, then on all of them (4 on nvidia-h200-x4).
  # RING_SIZES="1080" adds Wan2.1 1080p; RING_FRAMES="337" adds 337 frames (85 latents).
  # RING_COUNTS picks the rank counts (default: 2, then all); RING_NCCL=0 skips the NCCL rows;
  # RING_TRACE=1 traces the RING_FRAMES rows (summaries in $OUT/ring-traces.txt).
  counts=2
  [ "$GPUS" -gt 2 ] && counts="2 $GPUS"
  for n in ${RING_COUNTS:-$counts}; do
    LIST=$(seq -s, 0 $((n - 1)))
    run "wan_720p_81_${n}gpus" 60 $B vae-decode $D --latent-frames 21 --height 720 \
      --width 1280 --slice-frames 8 --warmup 1 --iters 1 --devices "$LIST" \
      --parallel sequence,spatial
    [ "${RING_NCCL:-1}" = 1 ] && run "wan_720p_81_${n}gpus_nccl" 45 $B vae-decode $D --latent-frames 21 --height 720 \
      --width 1280 --slice-frames 8 --warmup 1 --iters 1 --devices "$LIST" --nccl 1 \
      --parallel sequence --scaling 0
    run "seedvr2_720p_${n}gpus" 45 $B seedvr2 decode $S --height 720 --width 1280 --warmup 1 \
      --iters 1 --devices "$LIST" --scaling 0
    for size in ${RING_SIZES:-}; do
      run "wan_${size}p_81_${n}gpus" 90 $B vae-decode $D --latent-frames 21 --height "$size" \
        --width $((size * 16 / 9)) --slice-frames 8 --warmup 1 --iters 1 --devices "$LIST" \
        --parallel sequence,spatial
      run "seedvr2_${size}p_${n}gpus" 60 $B seedvr2 decode $S --height "$size" \
        --width $((size * 16 / 9)) --warmup 1 --iters 1 --devices "$LIST" --scaling 0
    done
    for frames in ${RING_FRAMES:-}; do
      T=()
      [ "${RING_TRACE:-0}" = 1 ] && T=(--trace "/tmp/ring-wan-${frames}-${n}")
      run "wan_720p_${frames}_${n}gpus" 120 $B vae-decode $D --latent-frames $(((frames - 1) / 4 + 1)) \
        --height 720 --width 1280 --slice-frames 8 --warmup 0 --iters 1 --devices "$LIST" \
        --parallel sequence --scaling 0 "${T[@]}"
    done
  done
fi
# RING_TRACE=1: the time-split rows of RING_FRAMES ran once more under the profiler; their
# summaries (tools/gpu-checks/trace_summary.py) go to $OUT/ring-traces.txt.
if [ "${RING_TRACE:-0}" = 1 ]; then
  for t in /tmp/ring-wan-*-time.json; do
    [ -f "$t" ] || continue
    echo "=== $t" >>"$OUT/ring-traces.txt"
    python3 tools/gpu-checks/trace_summary.py "$t" >>"$OUT/ring-traces.txt" 2>&1
  done
fi
exit 0
