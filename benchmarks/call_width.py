"""What a fixed call width costs: rows/s and latency per call at 1..W real rows, padded vs unpadded.

    python benchmarks/call_width.py                       # ACT (ResNet18, 2 cameras) + diffusion on the CPU
    python benchmarks/call_width.py --device cuda --width 16 --image 224

Two LeRobot policies with random weights, built as the adapter runs them (``lerobot:DIR`` through
``load_policy``): ACT with a ResNet18 backbone on two cameras (chunk mode) and a diffusion policy (ResNet18
image encoder, DDPM with ``--diffusion-steps`` denoising steps, history mode). For each number of real rows
r = 1..W it times a call padded to W rows (``--call-width W``, the default path) and an unpadded call of r rows
(``--call-width 0``), and prints latency (median of ``--repeats``) and real rows/s. The padded call costs the
same at every r (that is the point: one shape); the table says what the padding costs a batch-1 run and what a
full batch gains back.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from random_lerobot import save_random_lerobot


def _save(kind: str, directory: Path, image: int) -> Path:
    return save_random_lerobot(kind, directory, cameras=("observation.images.corner2", "observation.images.topview"),
                               image=image, diffusion_steps=ARGS.diffusion_steps)


def _observation(rows: int, image: int) -> dict:
    rng = np.random.default_rng(0)
    return {"state": rng.normal(size=(rows, 39)).astype(np.float32), "slot": np.arange(rows),
            "images": {c: rng.integers(0, 255, (rows, image, image, 3), dtype=np.uint8)
                       for c in ("corner2", "topview")},
            "episode_start": np.ones(rows, bool), "trial_start": np.ones(rows, bool), "active": np.ones(rows, bool),
            "episode_seed": np.arange(rows) + 1, "call": np.zeros(rows, np.int64), "task": ["reach-v3"] * rows}


def _time(policy, rows: int, image: int, repeats: int) -> float:
    obs = _observation(rows, image)
    policy.reset()
    policy.select_action(obs, ["reach"] * rows)  # warm-up
    times = []
    for _ in range(repeats):
        policy.reset()  # every row re-plans: one model call per call
        started = time.perf_counter()
        policy.select_action(obs, ["reach"] * rows)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    from lerobench.policies.loading import load_policy
    from lerobench.policies.serve import suite_context

    warnings.filterwarnings("ignore")
    print(f"# call width {ARGS.width}, device {ARGS.device}, images 2 x {ARGS.image}^2, median of {ARGS.repeats}")
    print("| policy | real rows | padded ms | padded rows/s | unpadded ms | unpadded rows/s | padded / unpadded |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ARGS.policies.split(","):
            path = _save(kind, Path(tmp) / kind, ARGS.image)
            base = suite_context("metaworld_mt10", device=ARGS.device)
            padded = load_policy(f"lerobot:{path}", base.__class__(**{**base.__dict__, "call_width": ARGS.width,
                                                                      "cameras": ("corner2", "topview"),
                                                                      "image_size": (ARGS.image, ARGS.image)}))
            plain = load_policy(f"lerobot:{path}", base.__class__(**{**base.__dict__, "call_width": 0,
                                                                     "cameras": ("corner2", "topview"),
                                                                     "image_size": (ARGS.image, ARGS.image)}))
            for rows in range(1, ARGS.width + 1):
                p, u = _time(padded, rows, ARGS.image, ARGS.repeats), _time(plain, rows, ARGS.image, ARGS.repeats)
                print(f"| {kind} | {rows} | {p * 1e3:.1f} | {rows / p:.1f} | {u * 1e3:.1f} | {rows / u:.1f} | "
                      f"{p / u:.2f} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--image", type=int, default=96, help="camera images are IMAGE x IMAGE")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--diffusion-steps", type=int, default=10)
    parser.add_argument("--policies", default="act,diffusion")
    ARGS = parser.parse_args()
    main()
