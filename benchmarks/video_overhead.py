"""Env-steps/s with and without video recording, for a policy that already consumes the video camera.

    MUJOCO_GL=egl python benchmarks/video_overhead.py --episodes 4 --steps 100

Frames the policy already rendered are reused for the video and encoding runs in a background
thread, so recording should cost little beyond the encoder's share of the CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # fixture_policies

from throughput import harness_rate  # noqa: E402 - the sibling benchmark, run from this directory


def rate(videos: int, args: argparse.Namespace) -> tuple[float, int]:
    return harness_rate(args.suite, args.task, args.steps, args.episodes, args.batch,
                        "fixture_policies:make_camera", videos)


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
