#!/usr/bin/env bash
# The whole loop of README.md, timed: record expert demos, train, evaluate both checkpoints at the protocol.
# Usage: bash examples/libero_bc/pipeline.sh [OUT]   (default runs/libero_bc_pipeline; from the repository root)
# TASKS (default 0: libero_object's first task; e.g. 0,1) and DEMOS (expert episodes per task, default 30) change
# what is recorded; the tests' checkpoints (tests/data/libero_bc/README.md) came from TASKS=0,1 DEMOS=20.
set -euo pipefail
OUT=${1:-runs/libero_bc_pipeline}
export MUJOCO_GL=${MUJOCO_GL:-egl}
SUITE=libero_object
TASKS=${TASKS:-0}
DEMOS=${DEMOS:-30}
step() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "pipeline: $name took $((SECONDS - t0)) s" | tee -a "$OUT/times.txt"; }
mkdir -p "$OUT"
: > "$OUT/times.txt"
step record lerobench eval --suite $SUITE --tasks $TASKS --policy libero-expert --episodes $DEMOS --record success \
    --record-size 64 --render-quality draft --perturb action_noise=0.1 --videos 0 --output "$OUT/demos"
step train python examples/libero_bc/train.py --demos "$OUT/demos" --suite $SUITE --out "$OUT/bc"
step eval-final env LIBERO_BC_DIR="$OUT/bc" lerobench eval --suite $SUITE --tasks $TASKS \
    --policy examples.libero_bc.policy:final --render-quality draft --videos 0 --output "$OUT/final"
step eval-early env LIBERO_BC_DIR="$OUT/bc" lerobench eval --suite $SUITE --tasks $TASKS \
    --policy examples.libero_bc.policy:early --render-quality draft --videos 0 --output "$OUT/early"
cat "$OUT/times.txt"
