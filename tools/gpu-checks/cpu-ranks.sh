#!/usr/bin/env bash
# Issue 28's CPU-ranks floor (2 ranks of T threads against 1 rank of T, time split) and what the
# host's CPUs are (lscpu: vCPUs that share physical cores, or a memory bus the ranks share, hold
# two ranks of 8 threads under 2x where the split itself costs ~1 %: docs/gpu.md, stop 47).
# Needs a wmbench (WMBENCH, default build-gpu/wmbench, else build/wmbench); runs no GPU.
# Usage: OUT=dir [THREADS="4 8"] [PIN="1"] [SIZE="192 336"] [LATENTS=21] [STEP_S=280]
#        [CEILING=0|1] [REPEAT=1] bash tools/gpu-checks/cpu-ranks.sh
# PIN="1 0": each thread count with the ranks on cores of their own (wmbench --pin-cpu 1, the
# default) and unpinned.
# CEILING=1: after each two-rank run, the host's own ceiling for two ranks of T threads: one
# process of T threads alone on CPUs [0, T) (taskset), then two such processes at once on
# [0, T) and [T, 2T), independent of each other (no split, no exchange). Two ranks can reach at
# most 2 × alone / side-by-side; what they reach of it is the split's own efficiency.
# REPEAT=n: the whole list n times, interleaved (the host's speed moves from run to run).
# Writes $OUT/lscpu.txt and $OUT/cpu-ranks.jsonl (per run: wmbench's JSON) and prints each
# speed-up with the ranks' busy seconds against the one rank's, the ceilings and the medians.
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
# One-device runs (no ranks) of T threads on CPUs $2 (taskset): prints wmbench's seconds.
alone() {
  taskset -c "$2" timeout "${STEP_S:-280}" "$B" vae-decode --dim 96 --device cpu --dtype fp32 \
    --threads "$1" --latent-frames "${LATENTS:-21}" --height "$height" --width "$width" \
    --slice-frames 4 --warmup 0 --iters 1 2>>"$OUT/cpu-ranks.log" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])' 2>/dev/null || echo null
}
for rep in $(seq "${REPEAT:-1}"); do
for t in ${THREADS:-4 8}; do
  for pin in ${PIN:-1}; do
    timeout "${STEP_S:-280}" "$B" vae-decode --dim 96 --device cpu --dtype fp32 --devices cpu --ranks 2 \
      --threads "$t" --parallel sequence --latent-frames "${LATENTS:-21}" --height "$height" \
      --width "$width" --slice-frames 4 --warmup 0 --iters 1 --scaling 0 --pin-cpu "$pin" \
      >"$OUT/step.json" 2>>"$OUT/cpu-ranks.log"
    rc=$?
    python3 - "$t" "$pin" "$rc" "$OUT/step.json" "$rep" >>"$J" <<'PY'
import json, sys
t, pin, rc, path, rep = sys.argv[1:6]
try:
    result = json.load(open(path))
except ValueError:
    result = None
print(json.dumps({"threads": int(t), "pin": int(pin), "rc": int(rc), "rep": int(rep),
                  "result": result}))
PY
  done
  if [ "${CEILING:-0}" = 1 ]; then
    a=$(alone "$t" "0-$((t - 1))")
    alone "$t" "0-$((t - 1))" >"$OUT/pair0.txt" &
    alone "$t" "$t-$((2 * t - 1))" >"$OUT/pair1.txt"
    wait
    echo "{\"threads\": $t, \"rep\": $rep, \"alone\": $a, \"side_by_side\": [$(cat "$OUT/pair0.txt"), $(cat "$OUT/pair1.txt")]}" >>"$J"
    rm -f "$OUT/pair0.txt" "$OUT/pair1.txt"
  fi
done
done
rm -f "$OUT/step.json"
python3 - "$J" <<'PY'
import json, statistics, sys
speedups, ceilings, efficiency = {}, {}, {}
last = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    t = d["threads"]
    if "alone" in d:
        pair = d["side_by_side"]
        if d["alone"] is None or None in pair:
            print(f'{t} threads, ceiling: no result')
            continue
        c = 2 * d["alone"] / max(pair)
        ceilings.setdefault(t, []).append(c)
        print(f'{t} threads, ceiling: alone {d["alone"]:.1f} s, side by side '
              f'{pair[0]:.1f} + {pair[1]:.1f} s: two ranks can reach {c:.3f}x')
        if t in last:
            efficiency.setdefault(t, []).append(last[t] / c)
            print(f'  the two ranks before it reached {last[t] / c:.3f} of that ceiling')
        continue
    r = d["result"]
    if not r:
        print(f'{t} threads a rank: exit {d["rc"]}, no result')
        continue
    v = r["sequence_parallel"]
    busy = [round(x["busy_seconds"], 1) for x in v["per_rank"]]
    print(f'{t} threads a rank, pinned {d.get("pin", 1)}, run {d.get("rep", 1)}: one rank '
          f'{r["seconds"]:.1f} s, two ranks {v["speedup"]:.3f}x, busy {busy} s')
    if d.get("pin", 1) == 1:
        speedups.setdefault(t, []).append(v["speedup"])
        last[t] = v["speedup"]
for t, v in speedups.items():
    line = f'{t} threads, median of {len(v)}: two ranks {statistics.median(v):.3f}x'
    if t in ceilings:
        line += (f', ceiling {statistics.median(ceilings[t]):.3f}x, of it '
                 f'{statistics.median(efficiency.get(t, [0])):.3f}')
    print(line)
PY
