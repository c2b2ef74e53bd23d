"""Run ALOHA's privileged expert on gym-aloha 0.1.5 through lerobench's backend: per-seed success and steps.

    python benchmarks/aloha_expert.py                          # both tasks, seeds 0..99: the table in docs/suites.md
    python benchmarks/aloha_expert.py --tasks AlohaInsertion-v0 --seeds 0-9
    python benchmarks/aloha_expert.py --seeds 12,40 --frames /tmp/aloha-fail   # a PNG strip of each failure

Episode ``i`` is gym-aloha's ``reset(seed=i)`` (LeRobot's seeds, ``lerobench eval --seed 0``), 400 steps at most,
success gym-aloha's top reward stage (the episode ends there). State only: no camera is rendered unless ``--frames``
asks for the failures' strips (the ``angle`` camera, 8 frames of 240x320).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from seed_ranges import parse_seeds

TASKS = ("AlohaTransferCube-v0", "AlohaInsertion-v0")


def make_env(task: str, max_steps: int):
    """The task's lerobench env with the privileged state the expert reads (as ``lerobench eval`` builds it)."""
    from lerobench.envs.base import EnvSpec, LazyTaskEnv
    from lerobench.suite.registry import get_backend, load_suite

    suite, backend = load_suite("aloha"), get_backend("aloha")
    spec = EnvSpec(suite=suite.name, backend="aloha", task=next(t for t in suite.tasks if t.name == task),
                   protocol=replace(suite.protocol(), max_steps=max_steps), seed=0, state_dim=backend.state_dim,
                   action_dim=backend.action_dim, privileged=True, action_bounds=backend.action_bounds)
    return LazyTaskEnv(spec, backend)


def run_episode(env, task: str, seed: int, frames: list | None) -> dict:
    from lerobench.policies.experts.aloha import plan_action

    obs, _ = env.reset(options={"episodes": [seed]})
    start, success, step, info = time.perf_counter(), False, 0, {}
    while True:
        if frames is not None:
            frames.append(env._raw.render("angle", 240, 320))
        obs, _, terminated, truncated, info = env.step(plan_action(step, obs["privileged"], task))
        step += 1
        if terminated or truncated:
            success = bool(terminated)
            break
    return {"seed": seed, "success": success, "steps": step, "stage": info["episode_end"]["max_progress"] * 4,
            "seconds": time.perf_counter() - start}


def write_strip(frames: list[np.ndarray], path: Path) -> None:
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    picks = np.linspace(0, len(frames) - 1, 8).round().astype(int)
    strip = np.concatenate([np.concatenate([frames[i] for i in picks[:4]], axis=1),
                            np.concatenate([frames[i] for i in picks[4:]], axis=1)], axis=0)
    cv2.imwrite(str(path), cv2.cvtColor(strip, cv2.COLOR_RGB2BGR))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated gym-aloha task names")
    parser.add_argument("--seeds", default="0-99", help="seeds: '0-99', '3,17' or a mix")
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--frames", type=Path, default=None, help="write a PNG strip of each failed episode here")
    args = parser.parse_args()

    table = []
    for task in args.tasks.split(","):
        env, results = make_env(task, args.max_steps), []
        for seed in parse_seeds(args.seeds):
            frames: list | None = [] if args.frames else None
            result = run_episode(env, task, seed, frames)
            results.append(result)
            print(f"{task}  seed {seed:3d}  {'ok  ' if result['success'] else 'FAIL'}  steps {result['steps']:3d}  "
                  f"stage {result['stage']:.0f}  {result['seconds']:.1f} s", flush=True)
            if frames is not None and not result["success"]:
                write_strip(frames, args.frames / f"{task}_seed{seed:03d}.png")
        env.close()
        wins = [r for r in results if r["success"]]
        table.append((task, len(wins), len(results), np.mean([r["steps"] for r in wins]) if wins else float("nan"),
                      [r["seed"] for r in results if not r["success"]]))
    print("\n| task | success | mean steps (successes) | failed seeds |\n|---|---|---|---|")
    for task, wins, n, steps, failed in table:
        print(f"| {task} | {wins}/{n} ({100 * wins / n:.0f}%) | {steps:.0f} | {', '.join(map(str, failed)) or '-'} |")


if __name__ == "__main__":
    main()
