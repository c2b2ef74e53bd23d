"""What videos cost: a default `lerobench eval` with and without videos, and the harness with a camera policy.

    MUJOCO_GL=egl python benchmarks/video_overhead.py                  # default runs, then the camera policy
    MUJOCO_GL=egl python benchmarks/video_overhead.py --legacy         # also the old default: every step, 480x480
    MUJOCO_GL=egl python benchmarks/video_overhead.py --skip-harness --episodes 50 2

Default runs: `lerobench eval --suite metaworld_mt10 --tasks reach-v3 --policy metaworld-expert` with the suite's
default episode count (50, of which the first 2 are recorded by the default `--videos 2`) and with `--episodes 2`
(every episode recorded: videos at their most expensive), each timed as a whole command with the default
videos and with `--videos 0`. Goal (issue 28, item 21): videos at most ~25% of a default run's wall time.
`--legacy` adds `--video-fps 80 --video-size 0`: every step rendered at 480x480, as before that item.

Harness part: frames the policy already rendered are reused for the video and encoding runs in a background
thread, so recording should cost little beyond the encoder's share of the CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # fixture_policies

LEGACY = ("--video-fps", "80", "--video-size", "0")
"""Settings that reproduce the videos before issue 28 item 21: every 80 Hz step rendered at the 480x480 image size."""


def wall(episodes: int | None, videos: tuple[str, ...], task: str) -> float:
    """Seconds of one whole `lerobench eval` command (start-up included: what a user waits for)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "lerobench", "eval", "--suite", "metaworld_mt10", "--tasks", task, "--policy",
               "metaworld-expert", "--output", str(Path(tmp) / "o"), *videos,
               *(["--episodes", str(episodes)] if episodes else [])]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")})
        return time.perf_counter() - start


def default_runs(args: argparse.Namespace) -> None:
    """Print each default run's wall time with and without videos and the videos' share of it."""
    variants = [("default videos", ())] + ([("legacy videos (80 fps, 480x480)", LEGACY)] if args.legacy else [])
    for episodes in args.runs:
        label = f"--episodes {episodes}" if episodes else "suite default episodes (50)"
        without = wall(episodes or None, ("--videos", "0"), args.task)
        print(f"{args.task}, {label}: --videos 0 {without:.1f} s", flush=True)
        for name, extra in variants:
            with_videos = wall(episodes or None, extra, args.task)
            print(f"  {name}: {with_videos:.1f} s; videos are {100 * (with_videos - without) / with_videos:.0f}% "
                  f"of the run (goal <= 25%)", flush=True)


def rate(videos: int, args: argparse.Namespace) -> tuple[float, int]:
    from throughput import harness_rate  # the sibling benchmark, run from this directory

    return harness_rate(args.suite, args.task, args.steps, args.harness_episodes, args.batch,
                        "fixture_policies:make_camera", videos)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--task", default="reach-v3")
    parser.add_argument("--runs", type=int, nargs="*", default=[0, 2],
                        help="episode counts of the default runs (0: the suite's default)")
    parser.add_argument("--legacy", action="store_true", help="also time the videos of before (every step, 480x480)")
    parser.add_argument("--skip-harness", action="store_true")
    parser.add_argument("--harness-episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    default_runs(args)
    if args.skip_harness:
        return
    base, _ = rate(0, args)
    print(f"camera policy, --videos 0: {base:,.1f} env-steps/s")
    for videos in (1, args.harness_episodes):
        r, n = rate(videos, args)
        print(f"camera policy, --videos {videos}: {r:,.1f} env-steps/s ({n} videos), {100 * (r / base - 1):+.1f}% "
              f"vs --videos 0")


if __name__ == "__main__":
    main()
