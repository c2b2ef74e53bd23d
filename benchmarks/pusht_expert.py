"""Run the PushT privileged expert directly on gym-pusht 0.1.8: per-seed success, steps and final coverage.

    python benchmarks/pusht_expert.py                       # seeds 0..99
    python benchmarks/pusht_expert.py --seeds 0-9 --noisy   # the degraded expert
    python benchmarks/pusht_expert.py --seeds 3,17 --video-dir /tmp/pusht-fail

Success as gym-pusht counts it: coverage > 0.95 at any step (the episode ends there), within 300 steps.
``--video-dir`` writes each failed episode as an mp4 and a PNG strip of 8 frames (384x384 renders).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from seed_ranges import parse_seeds

from lerobench.envs.base import PRIVILEGED_DIM
from lerobench.envs.pusht import privileged_state
from lerobench.policies.experts.pusht import PushTExpertPolicy


def privileged_row(env) -> np.ndarray:
    """The row the backend hands the expert (``lerobench.envs.pusht.privileged_state``), padded as the env pads it."""
    row = np.zeros(PRIVILEGED_DIM)
    state = privileged_state(env)
    row[:len(state)] = state
    return row


def write_video(frames: list[np.ndarray], directory: Path, name: str) -> None:
    import av
    import cv2

    directory.mkdir(parents=True, exist_ok=True)
    picks = np.linspace(0, len(frames) - 1, 8).round().astype(int)
    strip = np.concatenate([frames[i] for i in picks], axis=1)
    cv2.imwrite(str(directory / f"{name}.png"), cv2.cvtColor(strip, cv2.COLOR_RGB2BGR))
    with av.open(str(directory / f"{name}.mp4"), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())


def run_episode(env, policy: PushTExpertPolicy, seed: int, max_steps: int, frames: list | None) -> dict:
    env.reset(seed=seed)
    coverage, success, calls_s = float(env._get_coverage()), False, 0.0
    if frames is not None:
        frames.append(env.render())
    step = 0
    for step in range(1, max_steps + 1):
        observation = {"privileged": privileged_row(env)[None], "state": np.zeros((1, 2), np.float32),
                       "episode_seed": np.array([seed]), "trial": np.array([0]), "call": np.array([step - 1])}
        start = time.perf_counter()
        action = policy.select_action(observation, ["push the T onto the goal"])[0]
        calls_s += time.perf_counter() - start
        _, _, terminated, _, info = env.step(action)
        coverage = float(info["coverage"])
        if frames is not None:
            frames.append(env.render())
        if terminated:
            success = True
            break
    return {"seed": seed, "success": success, "steps": step, "coverage": coverage, "ms_per_call": 1e3 * calls_s / step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0-99", help="seeds: '0-99', '3,17' or a mix")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--noisy", action="store_true", help="the degraded expert (action noise std NOISE_STD)")
    parser.add_argument("--noise-std", type=float, default=None, help="with --noisy: another noise std (px)")
    parser.add_argument("--video-dir", type=Path, default=None, help="write failed episodes here")
    args = parser.parse_args()

    from gym_pusht.envs.pusht import PushTEnv

    from lerobench.policies.experts.pusht import NOISE_STD, NoisyPushTExpertPolicy

    std = NOISE_STD if args.noise_std is None else args.noise_std
    policy = NoisyPushTExpertPolicy(std) if args.noisy else PushTExpertPolicy()
    policy.reset()
    kwargs = {"visualization_width": 384, "visualization_height": 384} if args.video_dir else {}
    env = PushTEnv(obs_type="state", render_mode="rgb_array", **kwargs)
    results = []
    for seed in parse_seeds(args.seeds):
        frames: list | None = [] if args.video_dir else None
        result = run_episode(env, policy, seed, args.max_steps, frames)
        results.append(result)
        print(f"seed {seed:4d}  {'ok  ' if result['success'] else 'FAIL'}  steps {result['steps']:3d}  "
              f"coverage {result['coverage']:.3f}  {result['ms_per_call']:.1f} ms/call", flush=True)
        if frames is not None and not result["success"]:
            write_video(frames, args.video_dir, f"seed{seed:04d}")
    successes = [r for r in results if r["success"]]
    calls = sum(r["steps"] for r in results)
    print(f"success {len(successes)}/{len(results)} ({100 * len(successes) / len(results):.0f}%)  "
          f"mean final coverage {np.mean([r['coverage'] for r in results]):.3f}  "
          f"mean steps {np.mean([r['steps'] for r in results]):.1f} "
          f"(successes {np.mean([r['steps'] for r in successes]) if successes else float('nan'):.1f})  "
          f"{sum(r['ms_per_call'] * r['steps'] for r in results) / calls:.2f} ms/call")
    failed = [r["seed"] for r in results if not r["success"]]
    print("failed seeds:", failed)


if __name__ == "__main__":
    main()
