"""Frames rendered and env-steps/s for the same chunked camera policy at chunk 1 / 5 / 10, with and without videos.

    MUJOCO_GL=egl python benchmarks/render_savings.py --steps 40 --episodes 2 --batch 2

The policy (``tests/fixture_policies.py:ImageChunkPolicy``) reads the suite's first camera (Meta-World
corner2, LIBERO agentview, at the suite's image size) and returns 10-action chunks; ``--replan-steps``
executes 1, 5 or 10 of each. lerobench renders that camera only when an env's action queue runs dry,
so renders per episode fall from steps + 1 to about steps / chunk + 1; with ``--videos`` every episode
is recorded and the video camera (the same camera) is rendered at every step again. Episodes run to
``--steps`` (no early stop on success); wall time includes worker start-up (LIBERO: seconds).

The first line prints what the ``observe`` flag costs the parent per vector step: gymnasium splits the
``{"action", "observe"}`` action per env and pickles it to the worker, against a plain Box action.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # fixture_policies

from lerobench.core.results import EPISODES_FILE  # noqa: E402
from lerobench.core.rundir import read_episodes  # noqa: E402
from lerobench.execution.runner import Evaluation, RunSettings  # noqa: E402
from lerobench.suite.registry import load_suite  # noqa: E402

CASES = {"metaworld": ("smoke", "reach-v3"), "libero": ("smoke_libero", None)}


def measure(suite_name: str, task: str | None, chunk: int, videos: bool, args: argparse.Namespace) -> dict:
    suite = load_suite(suite_name)
    suite = suite.select_tasks([task or suite.tasks[0].name])
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunSettings(suite=suite, policy="fixture_policies:make_image_chunk", output=Path(tmp) / "o",
                               episodes=args.episodes, batch_size=args.batch, max_steps=args.steps,
                               stop_on_success=False, videos=args.episodes if videos else 0, replan_steps=chunk)
        evaluation = Evaluation(settings)
        start = time.perf_counter()
        results = evaluation.run()
        wall = time.perf_counter() - start
        records = read_episodes(settings.output / EPISODES_FILE)
    return {"rate": results["overall"]["env_steps_per_s"], "wall": wall,
            "renders": sum(r.renders for r in records) / len(records), "steps": records[0].steps}


def flag_overhead_us(n_envs: int = 2, action_dim: int = 7) -> tuple[float, float]:
    """Microseconds per vector step to split and pickle a Box action vs the Dict action with the flag."""
    import pickle
    import timeit

    import gymnasium as gym
    import numpy as np
    from gymnasium.vector.utils import batch_space, iterate

    from lerobench.envs.base import env_action

    box = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
    flagged = gym.spaces.Dict({"action": box, "observe": gym.spaces.Discrete(2)})
    actions = np.zeros((n_envs, action_dim), np.float32)
    cases = ((batch_space(box, n_envs), actions), (batch_space(flagged, n_envs), env_action(actions, np.ones(n_envs))))
    times = []
    for space, batch in cases:
        def send(space=space, batch=batch) -> list[bytes]:
            return [pickle.dumps(("step", a)) for a in iterate(space, batch)]
        times.append(min(timeit.repeat(send, number=2000, repeat=5)) / 2000 * 1e6)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--simulators", default="metaworld,libero")
    args = parser.parse_args()
    plain, flagged = flag_overhead_us(args.batch)
    print(f"action split + pickle per vector step ({args.batch} envs): Box {plain:.0f} us, "
          f"with the observe flag {flagged:.0f} us")
    print(f"{args.episodes} episodes x {args.steps} steps, batch {args.batch}; one camera at the suite's size")
    print(f"{'simulator':<10} {'chunk':>5} {'videos':>6} {'env-steps/s':>11} {'renders/ep':>10} {'wall s':>7}")
    for name in args.simulators.split(","):
        suite_name, task = CASES[name]
        for videos in (False, True):
            for chunk in (1, 5, 10):
                m = measure(suite_name, task, chunk, videos, args)
                print(f"{name:<10} {chunk:>5} {'all' if videos else 'none':>6} {m['rate']:>11,.1f} "
                      f"{m['renders']:>10.1f} {m['wall']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
