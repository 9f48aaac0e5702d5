#!/usr/bin/env bash
# The scorer pod's accelerator check, in one go (each step capped; at most 7 minutes in all):
#   0. env        torch, CUDA and cuDNN versions, the device, the TF32 settings in force, the
#                 attention kernel each of the pod's attention calls runs (cfpod.devinfo)
#   1. tests      the unit tests (pytest) with every model on cuda (float32); CPU-only tests skip
#   2. check      cuda float32 vs CPU float32 (the Go reference's numbers) and bfloat16
#                 attention vs float32 attention on the same inputs, both gated (cfpod.check)
#   3. bench-0.5b throughput on a random Qwen2.5-0.5B-shaped model: LAPO rows with prefix
#                 sharing (walk, tree), a padded batch and row by row, all timed; AttnSR graphs
#   4. bench-7b   the same on a random Qwen2.5-7B-shaped model initialized on the device
# Every step writes OUT/<step>.txt as it runs (benches also OUT/<step>.json after each
# measurement), so a timeout keeps what was done; OUT/steps.txt gets one line per finished
# step; the last line printed is the verdict.
# TF32: NVIDIA's containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which runs float32
# matmuls in TF32 (~3 decimal digits) and fails step 2; both overrides are printed and set to 0.
# Usage: scorer/gpupod/gpu_check.sh [--cpu] [--steps env,check,...] [output folder]
#   --cpu: a dry run of every step on CPU with tiny shapes (checks the script itself anywhere);
#   --steps: only these steps; PYTHON=... picks the interpreter.
set -uo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
MODE=cuda
STEPS=env,tests,check,bench-0.5b,bench-7b
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) MODE=cpu; shift ;;
    --steps) STEPS=$2; shift 2 ;;
    *) break ;;
  esac
done
OUT=${1:-${OUT:-/tmp/cfpod-gpu-check}}
mkdir -p "$OUT"
: > "$OUT/steps.txt"
BEGIN=$SECONDS
BUDGET=${CFPOD_CHECK_BUDGET:-420}

for v in TORCH_ALLOW_TF32_CUBLAS_OVERRIDE NVIDIA_TF32_OVERRIDE; do
  echo "tf32: $v was ${!v-<unset>}; set to 0" | tee -a "$OUT/steps.txt"
done
export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0 NVIDIA_TF32_OVERRIDE=0 PYTHONUNBUFFERED=1

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "gpu_check verdict: FAIL ($PY cannot import torch; set PYTHON to an interpreter that can)"
  exit 1
fi
if [ "$MODE" = cuda ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check verdict: FAIL (torch sees no CUDA device; run this on the accelerator machine, or --cpu for a dry run)"
  exit 1
fi

# The pod runs creditflow's Llama (python/creditflow/llama.py): the checkout's package unless
# the interpreter has one installed.
if ! "$PY" -c "import creditflow.llama" 2>/dev/null; then
  export PYTHONPATH="$(cd ../../python && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi

failed=()
# step NAME LIMIT_SECONDS COMMAND...: runs COMMAND into OUT/NAME.txt,
# prints its last lines, appends "NAME ok|FAIL|TIMEOUT|SKIPPED rc=.. seconds=.." to OUT/steps.txt.
step() {
  local name=$1 limit=$2 rc t0=$SECONDS
  shift 2
  case ",$STEPS," in *",$name,"*) ;; *) return ;; esac
  local left=$((BUDGET - (SECONDS - BEGIN) - 5))
  if [ "$left" -lt 20 ]; then
    echo "$name SKIPPED (the check's ${BUDGET} s are spent)" | tee -a "$OUT/steps.txt"
    failed+=("$name skipped")
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most $limit s)"
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  tail -n 30 "$OUT/$name.txt" | cut -c1-400
  local st=ok
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then st=TIMEOUT; elif [ $rc -ne 0 ]; then st=FAIL; fi
  [ $st != ok ] && failed+=("$name $st")
  echo "$name $st rc=$rc seconds=$((SECONDS - t0))" | tee -a "$OUT/steps.txt"
}

if [ "$MODE" = cuda ]; then
  step env 30 "$PY" -m cfpod.devinfo --device cuda --full-float32
  step tests 90 env CFPOD_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider -rs
  step check 60 "$PY" -m cfpod.check --device cuda
  step bench-0.5b 100 "$PY" -m cfpod.bench --device cuda --dtype bfloat16 --size 0.5b --json \
    --out "$OUT/bench-0.5b.json"
  step bench-7b 140 "$PY" -m cfpod.bench --device cuda --dtype bfloat16 --size 7b --init-on-device \
    --trajectories 32 --naive-trajectories 2 --padded-trajectories 8 --attention-lengths 8192,32768 --json \
    --out "$OUT/bench-7b.json"
else
  step env 60 "$PY" -m cfpod.devinfo --device cpu --full-float32
  step tests 120 env CFPOD_TEST_DEVICE=cpu CFPOD_IN_GPU_CHECK=1 "$PY" -m pytest -q -p no:cacheprovider \
    tests/test_attention.py
  step check 120 "$PY" -m cfpod.check --device cpu --tiny --trajectories 1 --tokens 600
  step bench-0.5b 120 "$PY" -m cfpod.bench --device cpu --size small --trajectories 2 --naive-trajectories 1 \
    --padded-trajectories 2 --attention-lengths 512 --budget 8192 --json --out "$OUT/bench-0.5b.json"
  step bench-7b 120 "$PY" -m cfpod.bench --device cpu --size small --init-on-device --trajectories 2 \
    --naive-trajectories 1 --padded-trajectories 2 --attention-lengths 512 --budget 8192 --json \
    --out "$OUT/bench-7b.json"
fi

secs=$((SECONDS - BEGIN))
echo "== results in $OUT"
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu_check verdict: PASS ($MODE; every step ok in $secs s)"
  exit 0
fi
echo "gpu_check verdict: FAIL ($MODE; $(IFS=,; echo "${failed[*]}") in $secs s)"
exit 1
