"""Cost of the observation digest per read (``lerobench.rollout.observation_digest``): what leaving it on costs a run.

    python benchmarks/observation_digest.py

One read = one row of a policy call: its state and each camera image hashed (BLAKE2b) and chained. Prints the
median microseconds per read for LIBERO's two 256x256 cameras (+ 8-D state) and one 480x480 Meta-World camera
(+ 39-D state), and the same as a share of a typical step (LIBERO ~15 ms unrendered, Meta-World ~0.3 ms).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from lerobench.rollout.observation_digest import ReadDigests

CASES = {"2 x 256x256 + state 8": (8, [(256, 256)] * 2), "1 x 480x480 + state 39": (39, [(480, 480)])}


def per_read_us(state_dim: int, sizes: list[tuple[int, int]], rows: int = 8, repeats: int = 30) -> float:
    """Median microseconds to digest one row of a ``rows``-row call."""
    rng = np.random.default_rng(0)
    batch = {"state": rng.normal(size=(rows, state_dim)).astype(np.float32),
             "images": {f"cam{k}": rng.integers(0, 256, (rows, h, w, 3), dtype=np.uint8)
                        for k, (h, w) in enumerate(sizes)}}
    digests = ReadDigests(rows)
    slots = np.arange(rows)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        digests.read(batch, slots)
        times.append((time.perf_counter() - started) / rows)
    return statistics.median(times) * 1e6


def main() -> None:
    for name, (state_dim, sizes) in CASES.items():
        us = per_read_us(state_dim, sizes)
        print(f"{name}: {us:.0f} us per read")


if __name__ == "__main__":
    main()
