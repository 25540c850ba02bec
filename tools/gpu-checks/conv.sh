#!/usr/bin/env bash
# The 64-channel convolution paths of the Real-ESRGAN networks, model only, on one GPU
# (docs/gpu.md "Convolutions"): `tuning conv=fused` (cuDNN's fused graph, the default), conv=own
# (our kernels) and conv=cudnn (cuDNN's convolution plus our element-wise passes), for
# realesr-animevideov3 on 1920x1080 and RealESRGAN_x4plus on 960x540, fp16. Assumes build-gpu/
# (tools/gpu-checks/build.sh, sourced for its library paths); one JSON object per run in
# $OUT/conv.jsonl.
set -u
: "${OUT:?set OUT}"
B=build-gpu/wmbench
for m in realesr-animevideov3 RealESRGAN_x4plus; do
  for t in conv=fused conv=own conv=cudnn; do
    timeout 90 "$B" upscale --model "$m" --device cuda:0 --precision fp16 --calls 30 --warmup 5 \
      --tuning "$t" | tr -d '\n' >> "$OUT/conv.jsonl"
    echo >> "$OUT/conv.jsonl"
  done
done
grep -o '"model":"[^"]*"\|"tuning":"[^"]*"\|"model_fps":[0-9.]*' "$OUT/conv.jsonl" | paste - - - 
