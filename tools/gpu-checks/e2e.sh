#!/usr/bin/env bash
# Issue 24 on one GPU (H100/H200), after the build (tools/gpu-checks/build.sh; this builds
# nothing and expects build-gpu/): the device frame path's gpu tests (and its CPU tests), then
# `wmbench e2e` on the issue's job shapes — 1920x1080 -> 3840x2160 realesr-animevideov3
# (scale 2), 960x540 -> 3840x2160 RealESRGAN_x4plus, 1280x720 -> 2560x1440 realesr-animevideov3
# (scale 2) — with libx264 veryfast crf 18 and libx265 fast (reported as skipped where this
# libavcodec has no libx265), a batch of 8 clips, one encoder against the automatic instances,
# NVDEC, the host path for comparison, and the model alone against compiled PyTorch
# (tools/bench/realesrgan_baseline.py: eager, channels_last, torch.compile
# max-autotune-no-cudagraphs; last, as its compiles take minutes).
#
# Writes two files under $OUT: e2e.json (every step: its command, exit status, seconds and the
# JSON it printed or the tests' summary) and e2e.log (stderr of everything). About 6 minutes on
# one H200 with 16 cores; E2E_COMPILE=0 leaves out the torch.compile baseline, E2E_QUICK=1 runs
# the tests and the first shape only.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/wm-e2e-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/opt/wm-deps/lib:/opt/wm-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=./build-gpu/wmbench
T=./build-gpu/tests
WORK=${E2E_WORKDIR:-/tmp/wm-e2e-work}
mkdir -p "$WORK"
LOG="$OUT/e2e.log"
STEPS="$WORK/steps.jsonl"
: >"$LOG"
: >"$STEPS"
START=$(date +%s)

# step NAME TIMEOUT_S KIND COMMAND...   KIND: json (stdout is one JSON object) or gtest
step() {
  local name=$1 limit=$2 kind=$3
  shift 3
  echo "=== $name: $*" >>"$LOG"
  local t0 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$WORK/stdout" 2>>"$LOG"
  rc=$?
  python3 - "$name" "$rc" "$t0" "$kind" "$WORK/stdout" "$*" >>"$STEPS" <<'PY'
import json, sys, time
name, rc, t0, kind, path, cmd = sys.argv[1:7]
text = open(path, errors="replace").read()
entry = {"step": name, "rc": int(rc), "seconds": round(time.time() - float(t0), 1), "command": cmd}
if kind == "json":
    try:
        entry["result"] = json.loads(text[text.index("{"):])
    except Exception:
        entry["stdout_tail"] = text[-2000:]
else:
    lines = text.splitlines()
    entry["summary"] = [l for l in lines if l.startswith(("[  PASSED", "[  FAILED", "[  SKIPPED"))
                        or "tests ran" in l or l.startswith(("[device", "[to rgb", "[from rgb"))][:80]
    if int(rc) != 0:
        entry["stdout_tail"] = text[-4000:]
print(json.dumps(entry))
PY
  echo "=== $name: rc $rc" >>"$LOG"
}

finish() {
  python3 - "$STEPS" "$OUT/e2e.json" "$START" <<'PY'
import json, subprocess, sys, time
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return str(e)
out = {"issue": 24, "seconds": round(time.time() - float(sys.argv[3]), 1),
       "gpu": sh("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"),
       "cores": sh("nproc"), "steps": steps}
# The floors' table: job fps beside its ceilings.
table = []
for s in steps:
    r = s.get("result") or {}
    if r.get("bench") == "e2e" and "job_fps" in r:
        table.append({k: r.get(k) for k in ("model", "input_size", "output_size", "codec",
                      "inputs", "instances", "frame_path", "decode", "job_fps", "ceiling_fps",
                      "ratio", "slower_ceiling", "gpu_busy_share")} |
                     {"model_fps": (r.get("model_alone") or {}).get("fps"),
                      "encoder_fps": (r.get("encoder_alone") or {}).get("fps"),
                      "bound": (r.get("job") or {}).get("bound"), "step": s["step"]})
out["table"] = table
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
}
trap finish EXIT

# 1. Tests: the device's (gpu) and the path's CPU ones.
for t in test_yuv_colour_gpu test_device_path_gpu test_yuv_colour test_segment_encode test_device_path \
         test_realesrgan_gpu; do
  [ -x "$T/$t" ] && step "$t" 240 gtest "$T/$t"
done

E2E="$B e2e --device cuda:0 --precision fp16 --workdir $WORK"
X264="--codec libx264 --preset veryfast --crf 18"
X265="--codec libx265 --preset fast --crf 18"

# 2. The three job shapes, with their ceilings in the same call.
step "anime_1080p_to_4k_x264" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 100 $X264
[ "${E2E_QUICK:-0}" = 1 ] && exit 0
step "x4plus_540p_to_4k_x264" 150 json $E2E --model RealESRGAN_x4plus --size 960x540 --scale 4 --frames 60 $X264
step "anime_720p_to_1440p_x264" 120 json $E2E --model realesr-animevideov3 --size 1280x720 --scale 2 --frames 100 $X264
step "anime_1080p_to_4k_x265" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 100 $X265
step "x4plus_540p_to_4k_x265" 150 json $E2E --model RealESRGAN_x4plus --size 960x540 --scale 4 --frames 60 $X265
step "anime_720p_to_1440p_x265" 120 json $E2E --model realesr-animevideov3 --size 1280x720 --scale 2 --frames 100 $X265

# 3. A batch of 8 clips on one GPU (automatic input lanes).
step "batch8_anime_1080p_to_4k_x264" 180 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 48 --inputs 8 $X264

# 4. One encoder against the automatic instances (shape 1); NVDEC; the host path as it was.
step "anime_1080p_to_4k_x264_one_encoder" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 100 --instances 1 $X264
step "anime_1080p_to_4k_x264_nvdec" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 100 --decode nvdec $X264
step "anime_1080p_to_4k_x264_host_path" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --scale 2 --frames 50 --frame-path host --warmup 0 $X264
step "anime_1080p_to_8k_x264" 150 json $E2E --model realesr-animevideov3 --size 1920x1080 --frames 50 $X264

# One encoder against two on segments, from the same 4K planes: speed, size, PSNR.
step "segments_4k_x264" 150 json $B segments --make 3840x2160:100 --instances 2 --codec libx264 --preset veryfast --crf 18 --workdir $WORK

# 5. The model alone against PyTorch in the same call (compiled last: minutes of autotuning).
MODES=eager,channels_last
[ "${E2E_COMPILE:-1}" = 1 ] && MODES=eager,channels_last,compile
step "model_vs_pytorch_anime" 240 json $B upscale --model realesr-animevideov3 --precision fp16 \
  --baseline tools/bench/realesrgan_baseline.py --baseline-modes $MODES --baseline-frames 4
step "model_vs_pytorch_x4plus" 300 json $B upscale --model RealESRGAN_x4plus --precision fp16 \
  --baseline tools/bench/realesrgan_baseline.py --baseline-modes $MODES --baseline-frames 4
exit 0
