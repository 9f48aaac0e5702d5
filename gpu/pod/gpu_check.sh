#!/usr/bin/env bash
# The scorer pod's accelerator check, in one go (each step is capped; at most 7 minutes in all):
#   1. the unit tests with every model on cuda (float32),
#   2. agreement of cuda float32 / bfloat16 with CPU float32 (the Go reference's numbers),
#   3. throughput on a randomly initialized ~0.5B Llama-shaped model (no download):
#      LAPO rows on the search-QA shape, with prefix sharing, row by row and (in tokens) a padded batch, and AttnSR
#      step graphs at 8k and 32k tokens.
# Usage: gpu/pod/gpu_check.sh [output folder]   (PYTHON=... picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
OUT=${1:-${OUT:-/tmp/cfpod-gpu-check}}
mkdir -p "$OUT"
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "gpu_check: $PY cannot import torch; set PYTHON to an interpreter that can" >&2
  exit 1
fi
"$PY" - <<'PYEOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device; run this on the accelerator machine")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB", flush=True)
PYEOF
status=0
echo "== 1/3 unit tests on cuda"
if ! CFPOD_TEST_DEVICE=cuda timeout 150 "$PY" -m unittest 2>&1 | tee "$OUT/unittest.txt" | tail -n 25; then status=1; fi
grep -q '^OK' "$OUT/unittest.txt" || status=1
echo "== 2/3 cuda vs cpu float32"
timeout 90 "$PY" -m cfpod.check --device cuda 2>&1 | tee "$OUT/check.txt" || status=1
echo "== 3/3 throughput (random ~0.5B model, bfloat16)"
timeout 180 "$PY" -m cfpod.bench --device cuda --dtype bfloat16 --json 2>&1 | tee "$OUT/bench.txt" || status=1
tail -n 1 "$OUT/bench.txt" > "$OUT/bench.json" || true
echo "== results in $OUT; status $status"
exit $status
