#!/usr/bin/env bash
# Issue 30 on a host with several GPUs (nvidia-h200-x2/-x4), after build-gpu/ exists (all.sh
# builds it): the multi-GPU tests, the SeedVR2 upscaler over every GPU (split and per batch),
# then the batch upscale of 8 inputs 1920x1080 -> 3840x2160
# (realesr-animevideov3 fp16, random weights, libx264 veryfast) on the first GPU against all of
# them in the same process, with the encoder's ceiling measured on the job's own frames (a lossless run), and the
# same batch with the built-in Lanczos resampler. The VAE scaling tables are ring.sh's. Writes $OUT/multi.jsonl and
# the tests' log into $LOGS (all.sh packs it) or $OUT.
set -u
: "${OUT:?set OUT}"
LOGS=${LOGS:-$OUT}
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
devs=$(seq -s, 0 $((n - 1)))
echo "GPUs: $n ($devs)"
# MULTI_TESTS=0 skips the tests, MULTI_BATCH=0 the batch upscale (to split them over two calls).
if [ "${MULTI_TESTS:-1}" = 1 ]; then
  (cd build-gpu && timeout "${MULTI_TESTS_S:-300}" ctest -L "${MULTI_LABELS:-multigpu}" \
    --timeout 280 --output-on-failure) > "$LOGS/ctest-multigpu.log" 2>&1
  echo "ctest -L ${MULTI_LABELS:-multigpu} rc $?"
  grep -E "tests passed|\*\*\*|Passed|Failed" "$LOGS/ctest-multigpu.log" | head -40
fi
# The SeedVR2 upscaler (3B shapes, random weights, 21 frames to 1080p): one GPU against all of
# them, the batch split inside (sequence) and a batch per GPU (data), each checked against one
# GPU's frames (max_diff_levels). MULTI_SEEDVR2=0 skips it.
if [ "${MULTI_SEEDVR2:-1}" = 1 ]; then
  timeout 240 build-gpu/wmbench seedvr2-upscale --device cuda:0 --dtype bf16 --model 3b \
    --frames 21 --height 1080 --width 1920 --warmup 1 --iters 1 --devices "$devs" \
    2>>"$LOGS/seedvr2-multi.log" | tr -d '\n' >> "$OUT/multi.jsonl"
  echo >> "$OUT/multi.jsonl"
fi
[ "${MULTI_BATCH:-1}" = 1 ] || exit 0
# MULTI_FRAMES: frames per input (24; 96 shows the batch past its lanes' start), MULTI_THREADS:
# the jobs' encode.threads to try ("0" = the thread budget's; e.g. "0 12 24" to choose the rule),
# MULTI_DECODE: the jobs' decode (software, the default; nvdec or auto: the inputs on NVDEC).
# MULTI_REPEAT: rounds of the job on all GPUs and its ceiling, interleaved (wmbench --repeat; the
# JSON's of_ceiling_median: one pair moved by ±7 % on a shared host), MULTI_CEILING_THREADS: the
# ceiling's thread splits (default: all four).
frames=${MULTI_FRAMES:-24}
for threads in ${MULTI_THREADS:-0}; do
  timeout "${MULTI_BATCH_S:-300}" build-gpu/wmbench upscale --devices "$devs" \
    --model realesr-animevideov3 \
    --precision fp16 --inputs 8 --make 1920x1080:$frames --scale 2 --warmup 1 \
    --encode-threads "$threads" --decode "${MULTI_DECODE:-software}" \
    --repeat "${MULTI_REPEAT:-1}" ${MULTI_CEILING_THREADS:+--ceiling-threads "$MULTI_CEILING_THREADS"} \
    --workdir "/tmp/wmbench-multi-$frames" \
    | tr -d '\n' >> "$OUT/multi.jsonl"
  echo >> "$OUT/multi.jsonl"
done
# The built-in Lanczos resampler on the same batch (the device frame path since 2026-11-29;
# 13.9 fps on two H200s before, through RGB float frames on the host). MULTI_RESAMPLE=0 skips it.
if [ "${MULTI_RESAMPLE:-1}" = 1 ]; then
  timeout 200 build-gpu/wmbench upscale --devices "$devs" --kind lanczos --inputs 8 \
    --make 1920x1080:$frames --scale 2 --warmup 1 | tr -d '\n' >> "$OUT/multi.jsonl"
  echo >> "$OUT/multi.jsonl"
fi
grep -o '"speed_up":[0-9.]*\|"of_ceiling":[0-9.]*\|"fps[a-z_]*":[0-9.]*' "$OUT/multi.jsonl" | head
grep -o '"of_ceiling_median":[^]]*]' "$OUT/multi.jsonl" | head
