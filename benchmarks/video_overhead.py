"""Env-steps/s with and without video recording, for a policy that already consumes the video camera.

    MUJOCO_GL=egl python benchmarks/video_overhead.py --episodes 4 --steps 100

Frames the policy already rendered are reused for the video and encoding runs in a background
thread, so recording should cost little beyond the encoder's share of the CPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from lerobench.registry import load_suite
from lerobench.runner import Evaluation, RunSettings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def rate(videos: int, args: argparse.Namespace) -> tuple[float, int]:
    suite = load_suite(args.suite).select_tasks([args.task])
    with tempfile.TemporaryDirectory() as tmp:
        settings = RunSettings(suite=suite, policy="fixture_policies:make_camera", output=Path(tmp) / "o",
                               episodes=args.episodes, batch_size=args.batch, max_steps=args.steps,
                               stop_on_success=False, videos=videos)
        results = Evaluation(settings).run()
        n_videos = len(list((Path(tmp) / "o").rglob("*.mp4")))
    return results["overall"]["env_steps_per_s"], n_videos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--task", default="reach-v3")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    base, _ = rate(0, args)
    print(f"--videos 0: {base:,.1f} env-steps/s")
    for videos in (1, args.episodes):
        r, n = rate(videos, args)
        print(f"--videos {videos}: {r:,.1f} env-steps/s ({n} videos), {100 * (r / base - 1):+.1f}% vs --videos 0")


if __name__ == "__main__":
    main()
