"""From the command to the first counted env step: issue 46's start-up targets, measured (no timed tests).

Three figures, each the time from launching the work to the run's first env step (``provenance.started`` +
``timing.first_step_s`` of its results.json, against the launch's wall clock: after the first reset, the first
policy call and the checks made at it):

- ``metaworld``: ``lerobench eval`` in a fresh process, Meta-World expert, one task (target <= 1.5 s);
- ``w3``: issue 34's W3 in a fresh process: libero_spatial task 0, ``--protocol lerobot``, batch 2, a random
  LeRobot ACT reading two 360x360 cameras (target <= 5 s);
- ``w3-again``: a second ``lerobench.evaluate`` of W3 in the same process as a first one (target <= 2 s).

Each figure is the median of N runs (default 3) with the spread; run it on a quiet machine:

    MUJOCO_GL=egl python benchmarks/first_step.py [--repeats N] [--only metaworld,w3,w3-again]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

W3_TASK = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"
TARGETS = {"metaworld": 1.5, "w3": 5.0, "w3-again": 2.0}


def first_step_at(run: Path) -> float:
    """Wall-clock time (epoch s) at which the run took its first env step."""
    results = json.loads((run / "results.json").read_text())
    started = datetime.fromisoformat(results["provenance"]["started"]).timestamp()
    if results["timing"].get("first_step_s") is None:
        raise SystemExit(f"{run}: no first_step_s (an executor whose workers step on their own clocks)")
    return started + float(results["timing"]["first_step_s"])


def fresh_process(args: list[str], out: Path) -> float:
    """Seconds from launching ``lerobench eval ARGS`` in a new process to its first env step."""
    launched = time.time()
    done = subprocess.run([sys.executable, "-m", "lerobench", "eval", *args, "--output", str(out)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode != 0:
        raise SystemExit(f"eval failed ({done.returncode}): {' '.join(args)}\n{done.stderr[-2000:]}")
    return first_step_at(out) - launched


SECOND_CALL = """
import json, sys, time
import lerobench
from datetime import datetime
kw = dict(tasks=[{task!r}], protocol="lerobot", episodes=2, batch_size=2, max_steps=10, videos=0, seed=0)
lerobench.evaluate("lerobot:{policy}", "libero_spatial", output=sys.argv[1], **kw)
launched = time.time()
lerobench.evaluate("lerobot:{policy}", "libero_spatial", output=sys.argv[2], **kw)
print(json.dumps({{"launched": launched}}))
"""


def second_call(policy: Path, tmp: Path, k: int) -> float:
    """Seconds from a second ``evaluate()`` call (same process, same W3) to its first env step."""
    script = SECOND_CALL.format(task=W3_TASK, policy=policy)
    first, second = tmp / f"again{k}-1", tmp / f"again{k}-2"
    done = subprocess.run([sys.executable, "-c", script, str(first), str(second)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode != 0:
        raise SystemExit(f"second evaluate() failed: {done.stderr[-2000:]}")
    launched = json.loads(done.stdout.strip().splitlines()[-1])["launched"]
    return first_step_at(second) - launched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="metaworld,w3,w3-again")
    args = parser.parse_args()
    chosen = args.only.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="first-step-"))
    policy = None
    if any(c.startswith("w3") for c in chosen):
        from random_lerobot import save_random_lerobot

        policy = save_random_lerobot("act", tmp / "act", cameras=("observation.images.image",
                                                                  "observation.images.image2"),
                                     image=360, state_dim=8, action_dim=7, action_std=0.5)
    cases = {
        "metaworld": lambda k: fresh_process(["--suite", "metaworld_mt10", "--tasks", "reach-v3", "--policy",
                                              "metaworld-expert", "--episodes", "2", "--max-steps", "10",
                                              "--videos", "0"], tmp / f"mw{k}"),
        "w3": lambda k: fresh_process(["--suite", "libero_spatial", "--tasks", W3_TASK, "--protocol", "lerobot",
                                       "--policy", f"lerobot:{policy}", "--episodes", "2", "--batch-size", "2",
                                       "--max-steps", "10", "--videos", "0", "--seed", "0"], tmp / f"w3{k}"),
        "w3-again": lambda k: second_call(policy, tmp, k),
    }
    print(f"# command -> first counted env step, median of {args.repeats} (min-max), this machine: "
          f"{os.cpu_count()} cores")
    print("| case | seconds | min-max | target |")
    print("|---|---|---|---|")
    for name in chosen:
        seconds = [cases[name](k) for k in range(args.repeats)]
        print(f"| {name} | {statistics.median(seconds):.2f} | {min(seconds):.2f}-{max(seconds):.2f} | "
              f"<= {TARGETS[name]:g} s |", flush=True)


if __name__ == "__main__":
    main()
