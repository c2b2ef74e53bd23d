"""What the default call shape costs whole runs: ``lerobench eval`` at the default vs unpadded (``--call-width 0``).

    MUJOCO_GL=egl python benchmarks/call_shape_runs.py                          # both workloads, every batch
    MUJOCO_GL=egl python benchmarks/call_shape_runs.py --workloads metaworld --batches 1,8 --max-steps 60
    MUJOCO_GL=egl python benchmarks/call_shape_runs.py --workloads w3 --batches 2 --parallel-batch 0 \
        --episodes 10 --max-steps 0                                              # issue 34's W3, whole

Workloads (random-init LeRobot ACT, ResNet18 backbone, chunk 10 = ``n_action_steps`` 10, seed 0):

- ``w3``: libero_spatial task 0, ``--protocol lerobot`` (two 360x360 cameras, agentview + wrist, 8-D state);
- ``metaworld``: metaworld_mt10 reach-v3,push-v3, ACT reading one 480x480 image (corner2) and the 39-D state.

Each configuration (batch size b with ``--episodes 2b`` per task unless ``--episodes``, and ``--parallel-tasks 2``
on two tasks) runs once untimed (warm caches), then twice back to back per pair, default and unpadded in
alternating order, in fresh processes (so one run's torch thread settings never
reach the other); wall time and CPU time (the run and its worker processes) are printed per pair, with
the ratio default / unpadded, each run's ``config.batch_invariant`` and the intra-op thread counts its calls
used (``config.batch_invariance.threads``). A shared, busy box makes single
runs noisy: ``--repeats`` interleaves more pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from random_lerobot import save_random_lerobot

W3_TASK = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
W3_TASK_1 = "pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate"


def _save_act(directory: Path, workload: str) -> Path:
    state, action, size = (8, 7, 360) if workload == "w3" else (39, 4, 480)
    images = ("observation.images.image", "observation.images.image2") if workload == "w3" else ("observation.image",)
    return save_random_lerobot("act", directory, cameras=images, image=size, state_dim=state, action_dim=action,
                               action_std=0.5)


def _run(args: list[str], out: Path) -> tuple[float, float, str]:
    """One ``lerobench eval`` in a fresh process: wall s, CPU s (with its workers), config.batch_invariant."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lerobench", "eval", *args, "--output", str(out)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"eval failed ({done.returncode}): {' '.join(args)}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    config = json.loads((out / "results.json").read_text())["config"]
    threads = (config.get("batch_invariance") or {}).get("threads") or {}
    counts = "/".join(str(c) for c in threads.get("counts", [])) or "-"
    return wall, cpu, f"{config.get('batch_invariant')}, threads {counts}"


def _configs(workload: str, policy: Path) -> list[tuple[str, list[str]]]:
    if workload == "w3":
        base = ["--suite", "libero_spatial", "--protocol", "lerobot", "--policy", f"lerobot:{policy}"]
        one = [*base, "--tasks", W3_TASK]
        two = [*base, "--tasks", f"{W3_TASK},{W3_TASK_1}"]
    else:
        one = two = ["--suite", "metaworld_mt10", "--tasks", "reach-v3,push-v3", "--policy", f"lerobot:{policy}"]
    common = ["--videos", "0", "--seed", "0", *(["--max-steps", str(ARGS.max_steps)] if ARGS.max_steps else [])]

    def episodes(b: int) -> list[str]:
        return ["--episodes", str(ARGS.episodes or 2 * b)]

    out = [(f"batch {b}", [*one, *common, "--batch-size", str(b), *episodes(b)]) for b in ARGS.batches]
    if ARGS.parallel_batch:
        b = ARGS.parallel_batch
        out.append((f"batch {b}, --parallel-tasks 2", [*two, *common, "--batch-size", str(b), *episodes(b),
                                                       "--parallel-tasks", "2"]))
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    print(f"# ACT ResNet18 (random, chunk 10), --max-steps {ARGS.max_steps}, episodes 2 x batch per task, "
          "one untimed warm-up run, then pairs back to back (default and --call-width 0, alternating which "
          f"goes first), {ARGS.repeats} pair(s) each; CPU = run + workers")
    print("| workload | run | default wall s | unpadded wall s | wall ratio | each pair | default CPU s | "
          "unpadded CPU s | default check, thread counts |\n|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for workload in ARGS.workloads.split(","):
            policy = _save_act(Path(tmp) / f"act-{workload}", workload)
            for name, args in _configs(workload, policy):
                runs: dict[str, list[tuple[float, float, str]]] = {"default": [], "unpadded": []}
                _run([*args, "--call-width", "0"], Path(tmp) / "warm-up")  # caches warm before either is timed
                for k in range(ARGS.repeats):
                    order = (("default", []), ("unpadded", ["--call-width", "0"]))
                    for label, extra in order if k % 2 == 0 else order[::-1]:  # neither always goes first
                        out = Path(tmp) / f"{workload}-{name}-{label}-{k}".replace(" ", "_").replace(",", "")
                        runs[label].append(_run([*args, *extra], out))
                d_wall = sum(r[0] for r in runs["default"]) / ARGS.repeats
                u_wall = sum(r[0] for r in runs["unpadded"]) / ARGS.repeats
                d_cpu = sum(r[1] for r in runs["default"]) / ARGS.repeats
                u_cpu = sum(r[1] for r in runs["unpadded"]) / ARGS.repeats
                pairs = " ".join(f"{d[0] / u[0]:.2f}" for d, u in zip(runs["default"], runs["unpadded"], strict=True))
                print(f"| {workload} | {name} | {d_wall:.1f} | {u_wall:.1f} | {d_wall / u_wall:.2f} | {pairs} | "
                      f"{d_cpu:.0f} | {u_cpu:.0f} | {runs['default'][0][2]} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="w3,metaworld")
    parser.add_argument("--batches", default="1,2,4,8")
    parser.add_argument("--parallel-batch", type=int, default=2,
                        help="batch size of the --parallel-tasks 2 run (0: none)")
    parser.add_argument("--max-steps", type=int, default=60, help="0: the suite's protocol horizon")
    parser.add_argument("--episodes", type=int, default=0, help="per task (0: 2 x the batch size)")
    parser.add_argument("--repeats", type=int, default=1, help="pairs per configuration (means are printed)")
    ARGS = parser.parse_args()
    ARGS.batches = [int(b) for b in ARGS.batches.split(",")]
    main()
