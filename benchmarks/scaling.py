"""The physical limit (N independent processes stepping their own env) vs the harness at N workers, same run.

    MUJOCO_GL=egl python benchmarks/scaling.py                       # state-only and rendered, N = 1..cores
    MUJOCO_GL=egl python benchmarks/scaling.py --steps 500 --episodes-per-worker 4 --modes state
    MUJOCO_GL=egl python benchmarks/scaling.py --executors auto,vector --modes rendered --image 96

The limit: N processes, each building a Meta-World env and stepping it with zero actions (rendering one
camera per step in ``rendered`` mode), no policy, no pipes, no files; timed from a barrier after the
build. The harness: a full ``Evaluation`` of one task with the same step count per episode
(``--no-stop-on-success``), ``executor`` auto (or as given) sized to N, whose rate includes worker
start-up, resets, the policy, the writer and results. Efficiency = harness / limit at the same N.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from lerobench.envs.base import EnvSpec, LazyTaskEnv
from lerobench.execution.runner import Evaluation, RunSettings
from lerobench.policies.base import ObservationNeeds
from lerobench.suite.registry import get_backend, load_suite
from lerobench.system import usable_cores


class CameraZero:
    """Zero actions, but consumes one camera (so every step renders); cheap to replicate."""

    replicable = True

    def __init__(self, context):
        self.observation_needs = ObservationNeeds(cameras=context.cameras[:1])
        self.action_dim = context.action_dim

    def reset(self):
        pass

    def select_action(self, observation, task_descriptions):
        return np.zeros((len(observation["state"]), self.action_dim), dtype=np.float32)


def make_camera_zero(context):
    return CameraZero(context)


def _independent(spec: EnvSpec, steps: int, episodes: int, barrier, results) -> None:
    env = LazyTaskEnv(spec, get_backend(spec.backend))
    env.reset(options={"episodes": [0]})  # build outside the timed part
    action = np.zeros(spec.action_dim, dtype=np.float32)
    barrier.wait()
    start = time.monotonic()
    for ep in range(episodes):
        env.reset(options={"episodes": [ep]})
        for _ in range(steps):
            env.step(action)
    results.put((start, time.monotonic(), steps * episodes))
    env.close()


def independent_rate(spec: EnvSpec, n: int, steps: int, episodes: int) -> float:
    """Env-steps/s of ``n`` processes each stepping its own env (the machine's limit for this work)."""
    ctx = multiprocessing.get_context("forkserver")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_independent, args=(spec, steps, episodes, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    out = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(o[2] for o in out) / (max(o[1] for o in out) - min(o[0] for o in out))


def harness(suite, task: str, steps: int, episodes: int, n: int, policy: str, executor: str) -> tuple[float, str]:
    """Env-steps/s of a full evaluation with ``n`` workers, and the executor that ran it."""
    with tempfile.TemporaryDirectory() as tmp:
        sized = {"batch_size": n} if executor == "vector" else {"workers": n}
        settings = RunSettings(suite=suite.select_tasks([task]), policy=policy, output=Path(tmp) / "o",
                               episodes=episodes, max_steps=steps, stop_on_success=False, executor=executor,
                               **sized)
        results = Evaluation(settings).run()
    config = results["config"]
    return results["overall"]["env_steps_per_s"], f"{config['executor_used']} x{config['workers_used']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--task", default="reach-v3")
    parser.add_argument("--steps", type=int, default=500, help="steps per episode (state-only)")
    parser.add_argument("--render-steps", type=int, default=60, help="steps per episode (rendered)")
    parser.add_argument("--episodes-per-worker", type=int, default=6)
    parser.add_argument("--max-workers", type=int, default=usable_cores())
    parser.add_argument("--image", type=int, default=96, help="rendered image side (pixels)")
    parser.add_argument("--modes", default="state,rendered")
    parser.add_argument("--executors", default="auto", help="comma-separated: auto,inline,vector,processes,ray")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # so workers can import make_camera_zero

    base = load_suite(args.suite)
    backend = get_backend(base.backend)
    print(f"{usable_cores()} usable cores; suite {base.name}, task {args.task}; efficiency = harness / limit")
    for mode in args.modes.split(","):
        rendered = mode == "rendered"
        steps = args.render_steps if rendered else args.steps
        protocol = replace(base.protocol(), max_steps=steps, image_size=(args.image, args.image))
        suite = replace(base, protocols={**base.protocols, "standard": protocol})
        task = suite.select_tasks([args.task]).tasks[0]
        cameras = protocol.cameras[:1] if rendered else ()
        spec = EnvSpec(suite=suite.name, backend=suite.backend, task=task, protocol=protocol, seed=0,
                       state_dim=backend.state_dim, action_dim=backend.action_dim, cameras=cameras,
                       stop_on_success=False)
        policy = "scaling:make_camera_zero" if rendered else "zero"
        label = f"rendered {args.image}x{args.image} {cameras[0]}" if rendered else "state-only"
        print(f"\n{label}, {steps} steps/episode, {args.episodes_per_worker} episodes per worker")
        print(f"{'N':>3} {'limit steps/s':>14} {'executor':>14} {'harness steps/s':>16} {'efficiency':>10}")
        for n in range(1, args.max_workers + 1):
            limit = independent_rate(spec, n, steps, args.episodes_per_worker)
            for executor in args.executors.split(","):
                rate, used = harness(suite, args.task, steps, n * args.episodes_per_worker, n, policy, executor)
                print(f"{n:>3} {limit:>14,.4g} {used:>14} {rate:>16,.4g} {rate / limit:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
