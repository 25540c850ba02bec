#!/usr/bin/env bash
# One device call: build everything on the GPU host, run the GPU tests, then the check scripts
# named in $CHECKS (tools/gpu-checks/NAME.sh, each writing at most two files under $OUT) in order,
# each bounded by its share of the time left. Logs are packed into $OUT/logs.tar.gz at the end
# (the device tool brings back at most 8 files).
#   CHECKS="e2e dit ring" LIMIT_S=560 bash tools/gpu-checks/all.sh
set -u
: "${OUT:?set OUT}"
: "${LIMIT_S:=560}"
LOGS=$(mktemp -d)
deadline=$((SECONDS + LIMIT_S))
pack() { tar -C "$LOGS" -czf "$OUT/logs.tar.gz" . 2>/dev/null; }
trap pack EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$LOGS/gpu.txt" 2>&1
echo "== build (at ${SECONDS}s)"
if ! bash tools/gpu-checks/build.sh > "$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -40
  exit 1
fi
echo "== built (at ${SECONDS}s)"
if [ "${GPU_TESTS:-1}" = 1 ]; then
  (cd build-gpu && timeout $((deadline - SECONDS - 60)) ctest -L "${GPU_LABELS:-gpu}" \
    --timeout 300 --output-on-failure > "$LOGS/ctest-gpu.log" 2>&1)
  echo "ctest rc $? (at ${SECONDS}s)"
  grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest-gpu.log" | head -20
fi
export LOGS
for check in ${CHECKS:-}; do
  left=$((deadline - SECONDS))
  [ "$left" -lt 20 ] && { echo "no time left for $check"; continue; }
  echo "== $check (at ${SECONDS}s, ${left}s left)"
  timeout "$left" bash "tools/gpu-checks/$check.sh" > "$LOGS/$check.log" 2>&1
  echo "$check rc $? (at ${SECONDS}s)"
  tail -5 "$LOGS/$check.log"
done
