#!/usr/bin/env bash
# Issue 28's CPU-ranks floor (2 ranks of T threads against 1 rank of T, time split) and what the
# host's CPUs are (lscpu: vCPUs that share physical cores, or a memory bus the ranks share, hold
# two ranks of 8 threads under 2x where the split itself costs ~1 %: docs/gpu.md, stop 47).
# Needs a wmbench (WMBENCH, default build-gpu/wmbench, else build/wmbench); runs no GPU.
# Usage: OUT=dir [THREADS="4 8"] [PIN="1"] [SIZE="192 336"] [LATENTS=21] [STEP_S=280] bash tools/gpu-checks/cpu-ranks.sh
# PIN="1 0": each thread count with the ranks on cores of their own (wmbench --pin-cpu 1, the
# default) and unpinned.
# Writes $OUT/lscpu.txt and $OUT/cpu-ranks.jsonl (per thread count: wmbench's JSON) and prints
# each speed-up with the ranks' busy seconds against the one rank's.
set -u
: "${OUT:?set OUT}"
mkdir -p "$OUT"
B=${WMBENCH:-build-gpu/wmbench}
[ -x "$B" ] || B=build/wmbench
if [ -d /opt/wm-deps ]; then
  export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
lscpu >"$OUT/lscpu.txt" 2>&1
grep -E "^(CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)|Model name|L3)" \
  "$OUT/lscpu.txt"
read -r height width <<<"${SIZE:-192 336}"
J=$OUT/cpu-ranks.jsonl
: >"$J"
for t in ${THREADS:-4 8}; do
  for pin in ${PIN:-1}; do
    timeout "${STEP_S:-280}" "$B" vae-decode --dim 96 --device cpu --dtype fp32 --devices cpu --ranks 2 \
      --threads "$t" --parallel sequence --latent-frames "${LATENTS:-21}" --height "$height" \
      --width "$width" --slice-frames 4 --warmup 0 --iters 1 --scaling 0 --pin-cpu "$pin" \
      >"$OUT/step.json" 2>>"$OUT/cpu-ranks.log"
    rc=$?
    python3 - "$t" "$pin" "$rc" "$OUT/step.json" >>"$J" <<'PY'
import json, sys
t, pin, rc, path = sys.argv[1:5]
try:
    result = json.load(open(path))
except ValueError:
    result = None
print(json.dumps({"threads": int(t), "pin": int(pin), "rc": int(rc), "result": result}))
PY
  done
done
rm -f "$OUT/step.json"
python3 - "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    r = d["result"]
    if not r:
        print(f'{d["threads"]} threads a rank: exit {d["rc"]}, no result')
        continue
    v = r["sequence_parallel"]
    busy = [round(x["busy_seconds"], 1) for x in v["per_rank"]]
    print(f'{d["threads"]} threads a rank, pinned {d.get("pin", 1)}: one rank {r["seconds"]:.1f} s, '
          f'two ranks {v["speedup"]:.3f}x, busy {busy} s')
PY
