"""Env-steps/s of one bare simulator vs the harness at batch 1..N on the same work.

    MUJOCO_GL=egl python benchmarks/throughput.py --suite smoke --task reach-v3 --episodes 8 --steps 200
    MUJOCO_GL=egl python benchmarks/throughput.py --camera corner2 --steps 50 --episodes 4   # rendering

Efficiency = harness rate / (workers x single-env rate): 1.0 means the harness adds no overhead and
scales perfectly; on a 2-core box batch 2 cannot exceed ~2 cores minus the policy/main process.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.execution.runner import Evaluation, RunSettings
from lerobench.suite.registry import get_backend, load_suite


def single_env_rate(spec: EnvSpec, steps: int, episodes: int) -> float:
    env = LazyTaskEnv(spec, get_backend(spec.backend))
    env.reset(options={"episodes": [0]})  # build outside the timed part
    action = np.zeros(spec.action_dim, dtype=np.float32)
    start, done = time.perf_counter(), 0
    for ep in range(episodes):
        env.reset(options={"episodes": [ep]})
        for _ in range(steps):
            env.step(action)
            done += 1
    rate = done / (time.perf_counter() - start)
    env.close()
    return rate


def harness_rate(suite_name: str, task: str, steps: int, episodes: int, batch: int, policy: str,
                 videos: int = 0) -> tuple[float, int]:
    """Env-steps/s of a full evaluation of one task (episodes run to ``steps``), and the videos it wrote."""
    suite = load_suite(suite_name).select_tasks([task])
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunSettings(suite=suite, policy=policy, output=Path(tmp) / "o", episodes=episodes,
                               batch_size=batch, max_steps=steps, stop_on_success=False, videos=videos)
        results = Evaluation(settings).run()
        n_videos = len(list((Path(tmp) / "o").rglob("*.mp4")))
    return results["overall"]["env_steps_per_s"], n_videos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--task", default="reach-v3")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--camera", default=None, help="render this camera every step (camera policy)")
    args = parser.parse_args()

    suite = load_suite(args.suite).select_tasks([args.task])
    backend = get_backend(suite.backend)
    protocol = replace(suite.protocol(), max_steps=args.steps)
    cameras = (args.camera,) if args.camera else ()
    spec = EnvSpec(suite=suite.name, backend=suite.backend, task=suite.tasks[0], protocol=protocol, seed=0,
                   state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                   stop_on_success=False)
    single = single_env_rate(spec, args.steps, min(args.episodes, 3))
    print(f"single env (no harness, in-process): {single:,.0f} env-steps/s"
          f"{' with camera ' + args.camera if args.camera else ''}")
    policy = "fixture_policies:make_camera" if args.camera else "zero"
    if args.camera:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    print(f"{'batch':>5} {'env-steps/s':>12} {'efficiency':>10}  (includes worker start-up and resets)")
    for batch in range(1, args.max_batch + 1):
        rate, _ = harness_rate(args.suite, args.task, args.steps, args.episodes, batch, policy)
        print(f"{batch:>5} {rate:>12,.0f} {rate / (batch * single):>10.2f}")


if __name__ == "__main__":
    main()
