#!/bin/bash
# The same episodes before and after a change, on both simulators and every executor (issue 46's check):
#
#     MUJOCO_GL=egl bash benchmarks/same_episodes.sh <git ref before> [output dir]
#
# Runs, with the code at <ref> (a git worktree) and with this checkout's, each with --batch-size 1 (inline),
# --batch-size 3 (vector workers; on 2 cores they share the task template's GL context), --executor processes
# and --executor ray:
#   LIBERO: the camera policy learned from LIBERO's demos (examples/libero_bc, tests/data/libero_bc) on
#           libero_object tasks 0-1 at 64x64 and 160 steps (it solves task 0 and fails task 1);
#   Meta-World: the expert declaring a camera (tests/fixture_policies.py make_camera_expert) on reach-v3 and
#           push-v3 at 60 steps (some episodes succeed, some do not).
# then `lerobench compare` of each pair: every episode's outcome, length and observation digest must be equal.
set -euo pipefail
before=${1:?usage: same_episodes.sh <git ref before> [output dir]}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$(mktemp -d /tmp/same-episodes-XXXX)}
python=${PYTHON:-python}
export MUJOCO_GL=${MUJOCO_GL:-egl} PYTHONWARNINGS=ignore LIBERO_BC_DIR="$root/tests/data/libero_bc"
[ -d "$out/before-src" ] || git -C "$root" worktree add -q --detach "$out/before-src" "$before"
(cd "$root/tests" && $python -c "
from pathlib import Path; from helpers import libero_suite_copy
libero_suite_copy(Path('$out'), 'libero_object', [0, 1], 'libero_object_small',
                  {'image_size = [256, 256]': 'image_size = [64, 64]', 'max_steps = 280': 'max_steps = 160'})")
libero="--suite $out/libero_object_small.toml --policy examples.libero_bc.policy:final --episodes 3 --videos 0"
metaworld="--suite metaworld_mt10 --tasks reach-v3,push-v3 --policy fixture_policies:make_camera_expert"
metaworld="$metaworld --episodes 3 --max-steps 60 --videos 0"
executors=("b1:--batch-size 1" "b3:--batch-size 3" "processes:--executor processes --workers 2"
           "ray:--executor ray --workers 2")
for side in before after; do
  src=$root; [ "$side" = before ] && src=$out/before-src
  for entry in "${executors[@]}"; do
    name=${entry%%:*}; args=${entry#*:}
    for sim in libero metaworld; do
      run=$out/$side/$sim-$name
      [ -e "$run/results.json" ] && continue
      mkdir -p "$out/$side"
      flags=$libero; [ $sim = metaworld ] && flags=$metaworld
      # shellcheck disable=SC2086
      (cd "$src" && PYTHONPATH="$src:$src/tests" $python -m lerobench eval $flags $args --output "$run" \
        > "$run.log" 2>&1) || { echo "$side $sim $name failed: $run.log"; exit 1; }
    done
  done
done
for sim in libero metaworld; do
  for entry in "${executors[@]}"; do
    name=${entry%%:*}
    $python -m lerobench compare "$out/before/$sim-$name" "$out/after/$sim-$name" --json | $python -c "
import json, sys
d = json.load(sys.stdin)
lines = {side: sorted((e['task'], e['episode'], e['trial'], e['success'], e['steps'], e['obs_digest'])
                      for e in map(json.loads, open(f'$out/{side}/$sim-$name/episodes.jsonl')))
         for side in ('before', 'after')}
same = d['same_observations_throughout']
print(f\"$sim $name: {d['matched_episodes']} matched, observations {same['identical']} identical / \"
      f\"{same['different']} different, successes {sum(x[3] for x in lines['after'])}/{len(lines['after'])}, \"
      f\"outcomes and lengths {'equal' if lines['before'] == lines['after'] else 'DIFFERENT'}\")"
  done
done
echo "outputs: $out"
