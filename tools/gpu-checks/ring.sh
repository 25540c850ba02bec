#!/usr/bin/env bash
# GPU checks and measurements of issue 28 (the time split as a ring, every rank on the tuned
# path, SeedVR2's time split, the scaling model, auto), for the lead's GPU run. Builds nothing:
# build-gpu/ must hold wmbench and the tests (tools/gpu-checks/build.sh wmbench
# test_sequence_parallel_gpu test_spatial_parallel_gpu test_seedvr2_vae_gpu
# test_sequence_parallel_multigpu test_seedvr2_vae_multigpu test_parallel_jobs_multigpu wmbatch).
#
# Usage: tools/gpu-checks/ring.sh [GPUS] [long] [cpu]   (or CHECKS=ring tools/gpu-checks/all.sh)
#   GPUS  the GPUs to use (1, 2 or 4; default: every GPU nvidia-smi lists). With one GPU the
#         ranks share it (the
#         floors: 2 and 4 ranks against one rank, and the scaling model's prediction for 2 and 4
#         GPUs); with 2 or 4 the same decodes run with a rank per GPU too (in-process and NCCL).
#   long  adds the 337-frame 1080p decodes.
#   cpu   runs only the CPU-rank floor (2 × 8 threads against 1 × 8 on a 16-core host, 21 latent
#         frames at 480p, dim 96: ~25 minutes, no GPU needed).
# Writes $OUT/ring.jsonl (one JSON object per command: name, command, exit code, seconds, and
# the command's own JSON as "result") and $OUT/ring.log (stderr, the tests' output).
# One H200, the default set: ~8 minutes (estimated; 2 GPUs add ~4, long ~3).
set -u
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$GPUS" -ge 1 ] 2>/dev/null || GPUS=1
LONG=0
CPU=0
for a in "$@"; do
  case "$a" in
    long) LONG=1 ;;
    cpu) CPU=1 ;;
    [0-9]*) GPUS=$a ;;
    *) echo "usage: $0 [GPUS] [long] [cpu]" >&2; exit 64 ;;
  esac
done
OUT=${OUT:-out}
mkdir -p "$OUT"
JSONL=$OUT/ring.jsonl
LOG=$OUT/ring.log
: >"$JSONL"
: >"$LOG"
if [ -d /opt/wm-deps ]; then
  export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=build-gpu/wmbench
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

# run NAME TIMEOUT COMMAND...: runs it (stdout: its JSON), appends one line to $JSONL.
run() {
  local name=$1 limit=$2
  shift 2
  echo "=== $name: $*" >>"$LOG"
  local start end rc
  start=$(date +%s.%N)
  timeout "$limit" "$@" >"$TMP" 2>>"$LOG"
  rc=$?
  end=$(date +%s.%N)
  python3 - "$name" "$rc" "$start" "$end" "$TMP" "$*" >>"$JSONL" <<'EOF'
import json, sys
name, rc, start, end, path, cmd = sys.argv[1:7]
text = open(path).read().strip()
try:
    result = json.loads(text.splitlines()[-1]) if text else None
except ValueError:
    result = text[-2000:]
print(json.dumps({"name": name, "command": cmd, "exit_code": int(rc),
                  "seconds": round(float(end) - float(start), 2), "result": result}))
EOF
  echo "=== $name: exit $rc" >>"$LOG"
}

# tests NAME LABEL REGEX: a ctest subset; the summary line goes to $JSONL, the output to $LOG.
tests() {
  local name=$1 label=$2 regex=$3
  echo "=== $name" >>"$LOG"
  ctest --test-dir build-gpu -L "$label" -R "$regex" --output-on-failure --timeout 300 >"$TMP" 2>&1
  local rc=$?
  cat "$TMP" >>"$LOG"
  python3 - "$name" "$rc" "$TMP" >>"$JSONL" <<'EOF'
import json, sys
name, rc, path = sys.argv[1:4]
lines = [l for l in open(path).read().splitlines() if "tests passed" in l or "Failed" in l
         or "***" in l or "Passed" in l]
print(json.dumps({"name": name, "exit_code": int(rc), "result": lines[-30:]}))
EOF
}

if [ "$CPU" = 1 ]; then
  # The CPU-rank floor: 2 ranks × 8 threads against 1 rank × 8 threads on the 16 cores, time
  # split (the ring), 21 latent frames at 480p in slices of 4, dim 96.
  run cpu_ranks_480p_21 3600 $B vae-decode --dim 96 --device cpu --devices cpu --ranks 2 \
    --threads 8 --parallel sequence --latent-frames 21 --height 480 --width 832 \
    --slice-frames 4 --warmup 0 --iters 1 --scaling 0
  exit 0
fi

D="--dim 96 --device cuda:0 --dtype bf16"
S="--device cuda:0 --dtype bf16"

# 1. The GPU tests of the splits (2 ranks on one GPU against one rank, fp32 and bf16; NCCL).
#    Under all.sh ($LOGS set) the GPU label ran already.
if [ -z "${LOGS:-}" ]; then
  tests gpu_tests gpu "sequence_parallel|spatial_parallel|seedvr2_vae_gpu"
fi
if [ "$GPUS" -ge 2 ]; then
  tests multigpu_tests multigpu "."
fi

# 2. Was it a cliff or a stall? The row split of a whole 21-latent 720p slice (the plain path
#    ran >2^31-element convolutions through cuDNN's autotuning; now the tuned path).
run spatial_whole_slice_720p 300 $B vae-decode $D --iters 1 --latent-frames 21 --height 720 \
  --width 1280 --devices 0 --ranks 2 --parallel spatial --scaling 0

# 3. Wan2.1: ranks sharing one GPU against one rank (floors: 2 ranks >= 0.92, 4 ranks >= 0.85),
#    the scaling model's per-rank compute and its prediction for GPUs of their own; the
#    one-device parts are the no-regression numbers (480p >= 128, 720p >= 54, 1080p >= 23 fps).
#    81 frames in one slice, 337 frames in slices of 8 latent frames (the ring over 11 slices).
run wan_480p_81 200 $B vae-decode $D --latent-frames 21 --height 480 --width 832 --warmup 1 \
  --iters 2 --devices 0 --ranks 2 --scaling 0
run wan_720p_81 300 $B vae-decode $D --latent-frames 21 --height 720 --width 1280 --warmup 1 \
  --iters 2 --devices 0 --ranks 2,4
run wan_1080p_81 300 $B vae-decode $D --latent-frames 21 --height 1080 --width 1920 --warmup 1 \
  --iters 2 --devices 0 --ranks 2,4
run wan_720p_337 300 $B vae-decode $D --latent-frames 85 --height 720 --width 1280 \
  --slice-frames 8 --warmup 1 --iters 1 --devices 0 --ranks 2,4
if [ "$LONG" = 1 ]; then
  run wan_1080p_337 600 $B vae-decode $D --latent-frames 85 --height 1080 --width 1920 \
    --slice-frames 8 --warmup 1 --iters 1 --devices 0 --ranks 2,4 --scaling 0
fi

# 4. SeedVR2 decode: 2 ranks sharing the GPU against one rank (floor >= 0.9), 720p, and 1080p in
#    16 GiB (slices of 16 latent frames, the job default on GPUs); one-device parts: no
#    regression (1080p >= 8 fps in 16 GiB, >= 9 uncapped).
run seedvr2_720p 300 $B seedvr2 decode $S --height 720 --width 1280 --warmup 1 --iters 1 \
  --devices 0 --ranks 2
run seedvr2_1080p_16gib 400 $B seedvr2 decode $S --height 1080 --width 1920 --slice-frames 16 \
  --warmup 1 --iters 1 --max-gpu-gib 16 --devices 0 --ranks 2
run seedvr2_1080p_one 200 $B seedvr2 decode $S --height 1080 --width 1920 --warmup 1 --iters 1

# 6. Several GPUs: a rank per GPU, in-process exchange (peer copies) and NCCL, time and rows.
if [ "$GPUS" -ge 2 ]; then
  LIST=$(seq -s, 0 $((GPUS - 1)))
  for hw in "720 1280" "1080 1920"; do
    set -- $hw
    run "wan_${1}p_81_${GPUS}gpus" 300 $B vae-decode $D --latent-frames 21 --height "$1" \
      --width "$2" --slice-frames 8 --warmup 1 --iters 1 --devices "$LIST" \
      --parallel sequence,spatial
    run "wan_${1}p_81_${GPUS}gpus_nccl" 300 $B vae-decode $D --latent-frames 21 --height "$1" \
      --width "$2" --slice-frames 8 --warmup 1 --iters 1 --devices "$LIST" --nccl 1 \
      --parallel sequence --scaling 0
  done
  run "seedvr2_1080p_${GPUS}gpus" 400 $B seedvr2 decode $S --height 1080 --width 1920 \
    --slice-frames 16 --warmup 1 --iters 1 --devices "$LIST" --scaling 0
fi
exit 0
