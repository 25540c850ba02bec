#!/usr/bin/env bash
# Installs what is missing, builds, and runs the demo job: the sample clip (with audio)
# upscaled 2x with the built-in lanczos model into out/sample_x2.mp4.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
wm_install
wm_build
./build/wmbatch jobs/demo.yaml "$@"
