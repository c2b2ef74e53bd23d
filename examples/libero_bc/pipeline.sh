#!/usr/bin/env bash
# The whole loop of README.md, timed: record expert demos, train, evaluate both checkpoints at the protocol.
# Usage: bash examples/libero_bc/pipeline.sh [OUT]   (default runs/libero_bc_pipeline; from the repository root)
set -euo pipefail
OUT=${1:-runs/libero_bc_pipeline}
export MUJOCO_GL=${MUJOCO_GL:-egl}
SUITE=libero_object
TASKS=0
step() { local name=$1; shift; local t0=$SECONDS; "$@"; echo "pipeline: $name took $((SECONDS - t0)) s" | tee -a "$OUT/times.txt"; }
mkdir -p "$OUT"
: > "$OUT/times.txt"
step record lerobench eval --suite $SUITE --tasks $TASKS --policy libero-expert --episodes 30 --record success \
    --record-size 64 --render-quality draft --perturb action_noise=0.1 --videos 0 --output "$OUT/demos"
step train python examples/libero_bc/train.py --demos "$OUT/demos" --suite $SUITE --out "$OUT/bc"
step eval-final env LIBERO_BC_DIR="$OUT/bc" lerobench eval --suite $SUITE --tasks $TASKS \
    --policy examples.libero_bc.policy:final --render-quality draft --videos 0 --output "$OUT/final"
step eval-early env LIBERO_BC_DIR="$OUT/bc" lerobench eval --suite $SUITE --tasks $TASKS \
    --policy examples.libero_bc.policy:early --render-quality draft --videos 0 --output "$OUT/early"
cat "$OUT/times.txt"
