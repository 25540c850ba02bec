#!/usr/bin/env bash
# Issue 28's one-GPU floors in one call (docs/gpu.md, "One H200, 2026-11-30 (stop 44)"): ranks
# sharing one GPU against one rank (Wan2.1 720p/1080p x 81/337, 2 and 4 ranks; SeedVR2 720p and
# 1080p in 16 GiB, 2 ranks) and the no-regression fps of one device. Builds wmbench first
# (tools/gpu-checks/build.sh). Time splits as runs of each slice and as whole slices in turn.
# cuDNN's search is on throughout: it times 5 plans per shape since stop 47 (at 1080p 7 s a thread,
# where 10 took 78 s and kept the 1080p rows from finishing in stops 44-46). Rows in order of
# what they decide; a row the call's time does not reach is skipped. Each row says how many
# convolution shapes its timed runs met for the first time on their thread (each a search the
# warm-up did not take; stop 48: a search beside other ranks may keep a slow plan).
# Usage: OUT=dir bash tools/gpu-checks/floors28.sh     (LIMIT_S: the whole call, default 585)
# Writes $OUT/r28.jsonl (per step: name, exit code, seconds, command, wmbench's JSON),
# $OUT/steps.log (stderr) and $OUT/build.log.
set -u
: "${OUT:?set OUT}"
mkdir -p "$OUT"
start=$SECONDS
limit=${LIMIT_S:-585}
source tools/gpu-checks/build.sh wmbench >"$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "built at $((SECONDS - start)) s"
B=build-gpu/wmbench
D="--dim 96 --device cuda:0 --dtype bf16"
S="--device cuda:0 --dtype bf16"
J=$OUT/r28.jsonl
: >"$J"
step() { # step NAME LIMIT COMMAND...: under timeout, within the call's limit
  local name=$1 step_limit=$2
  shift 2
  local left=$((limit - (SECONDS - start)))
  if [ "$left" -lt 20 ]; then
    echo "$name: skipped (the call's time is spent)"
    return
  fi
  [ "$step_limit" -gt "$left" ] && step_limit=$left
  local t0=$SECONDS rc
  timeout "$step_limit" "$@" >"$OUT/step.json" 2>>"$OUT/steps.log"
  rc=$?
  python3 - "$name" "$rc" "$((SECONDS - t0))" "$*" "$OUT/step.json" >>"$J" <<'PY'
import json, sys
name, rc, secs, cmd, path = sys.argv[1:6]
text = open(path).read().strip()
try:
    result = json.loads(text)
except ValueError:
    result = text[-1500:]
print(json.dumps({"name": name, "rc": int(rc), "seconds": int(secs), "command": cmd,
                  "result": result}))
PY
  echo "$name: exit $rc in $((SECONDS - t0)) s"
}
P="--parallel sequence,whole"
W720="--latent-frames 21 --height 720 --width 1280 --slice-frames 8 --warmup 1 --iters 2 --devices 0"
W1080="--latent-frames 21 --height 1080 --width 1920 --slice-frames 8 --warmup 1 --iters 2 --devices 0"
step wan720_81 150 $B vae-decode $D $W720 --ranks 2,4 $P
step wan1080_81 200 $B vae-decode $D $W1080 --ranks 2,4 $P
step wan720_337 150 $B vae-decode $D ${W720/--latent-frames 21/--latent-frames 85} --ranks 2,4 $P \
  --scaling 0 --iters 1
step seedvr2_720p 120 $B seedvr2 decode $S --height 720 --width 1280 --warmup 1 --iters 2 \
  --devices 0 --ranks 2
step wan480 60 $B vae-decode $D --latent-frames 21 --height 480 --width 832 --warmup 1 --iters 3
step seedvr2_1080p 90 $B seedvr2 decode $S --height 1080 --width 1920 --warmup 1 --iters 1
step wan1080_337 200 $B vae-decode $D ${W1080/--latent-frames 21/--latent-frames 85} --ranks 2 $P \
  --scaling 0 --iters 1
step seedvr2_1080p_16gib 150 $B seedvr2 decode $S --height 1080 --width 1920 --slice-frames 16 \
  --max-gpu-gib 16 --warmup 1 --iters 1 --devices 0 --ranks 2
rm -f "$OUT/step.json"
python3 - "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    r = d["result"] if isinstance(d["result"], dict) else {}
    parts = [f'{d["name"]}: exit {d["rc"]}', f'one device {r.get("fps", 0):.1f} fps',
             f'warm-up {r.get("warmup_seconds", 0):.1f} s',
             f'new shapes timed {r.get("timed_new_shapes", "-")}']
    for k, v in r.items():
        if k.startswith(("sequence_parallel", "whole_parallel")) and isinstance(v, dict):
            parts.append(f'{k} {v.get("speedup", 0):.3f}x '
                         f'(new shapes timed {v.get("timed_new_shapes", "-")})')
            for a in v.get("allocator", []):
                parts.append(f'(peak {a["peak_gpu_gib"]:.1f} GiB, reserved '
                             f'{a["peak_reserved_gib"]:.1f}, retries {a["alloc_retries"]})')
    print(", ".join(parts))
PY
