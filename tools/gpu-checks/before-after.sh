#!/usr/bin/env bash
# Issue 27's same-machine check: wmbench built from an older tree against this one, the GPU
# benchmarks run in turn (old, new, old, new) in one call. The older tree travels as a source
# tarball in the carried .deps folder (`git archive 4d80335 CMakeLists.txt io parallel scheduler
# src tools watch | xz > .deps/old-src.tar.xz`: ~0.3 MB; the tests are not built).
# Usage: OUT=dir [OLD=.deps/old-src.tar.xz] [LIMIT_S=570] bash tools/gpu-checks/before-after.sh
# Writes $OUT/before-after.jsonl (per run: which build, the benchmark's name, exit code, its JSON)
# and prints each benchmark's medians and their ratio (new / old).
set -u
: "${OUT:?set OUT}"
OLD=${OLD:-.deps/old-src.tar.xz}
mkdir -p "$OUT"
start=$SECONDS
limit=${LIMIT_S:-570}
rm -rf build-old-src && mkdir -p build-old-src && tar -C build-old-src -xJf "$OLD" || exit 1
# The bundle unpacked once, then both builds at once on the host's cores (the current one
# sourced here: its library paths are the benchmarks').
[ -d /opt/wm-deps ] || tar -C / -xJf .deps/wm-deps.tar.xz || exit 1
(WM_SRC=build-old-src WM_BUILD=build-old WM_CMAKE_ARGS=-DWMBATCH_BUILD_TESTS=OFF \
  source tools/gpu-checks/build.sh wmbench >"$OUT/build-old.log" 2>&1) &
old_pid=$!
source tools/gpu-checks/build.sh wmbench >"$OUT/build-new.log" 2>&1
new_rc=$?
wait $old_pid
old_rc=$?
echo "built (old exit $old_rc, new exit $new_rc) at $((SECONDS - start)) s"
[ $old_rc = 0 ] && [ $new_rc = 0 ] || { grep -hE "error" "$OUT"/build-*.log | head -20; exit 1; }
J=$OUT/before-after.jsonl
: >"$J"
D="--dim 96 --device cuda:0 --dtype bf16 --latent-frames 21 --warmup 1"
benches=(
  "wan480|vae-decode $D --height 480 --width 832 --iters 3"
  "wan720|vae-decode $D --height 720 --width 1280 --iters 2"
  "wan1080|vae-decode $D --height 1080 --width 1920 --slice-frames 4 --iters 2"
  "seedvr2_1080p|seedvr2 decode --device cuda:0 --dtype bf16 --height 1080 --width 1920 --warmup 1 --iters 1"
  "animevideov3|upscale --model realesr-animevideov3 --device cuda:0 --precision fp16 --calls 10"
  "x4plus|upscale --model RealESRGAN_x4plus --device cuda:0 --precision fp16 --calls 5"
)
for round in 1 2; do
  for entry in "${benches[@]}"; do
    name=${entry%%|*}
    args=${entry#*|}
    for build in old new; do
      left=$((limit - (SECONDS - start)))
      [ "$left" -lt 30 ] && { echo "$name ($build, round $round): no time left"; continue; }
      B=build-$build/wmbench
      [ $build = new ] && B=build-gpu/wmbench
      timeout $((left < 150 ? left : 150)) $B $args >"$OUT/run.json" 2>>"$OUT/runs.log"
      rc=$?
      python3 - "$build" "$name" "$rc" "$OUT/run.json" >>"$J" <<'PY'
import json, sys
build, name, rc, path = sys.argv[1:5]
try:
    result = json.load(open(path))
except ValueError:
    result = None
print(json.dumps({"build": build, "name": name, "rc": int(rc), "result": result}))
PY
    done
  done
done
rm -f "$OUT/run.json"
python3 - "$J" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    r = d["result"] or {}
    fps = r.get("fps", r.get("model_fps"))
    if d["rc"] == 0 and fps:
        runs.setdefault(d["name"], {}).setdefault(d["build"], []).append(fps)
for name, by in runs.items():
    old, new = by.get("old", []), by.get("new", [])
    if old and new:
        mo, mn = statistics.median(old), statistics.median(new)
        print(f"{name}: old {mo:.2f} fps {old}, new {mn:.2f} fps {new}, new/old {mn / mo:.3f}")
    else:
        print(f"{name}: old {old}, new {new}")
PY
