"""Which call shapes keep a row's bits, and what each costs: the measurements behind ``policies/width.py``.

    python benchmarks/call_shape.py                                  # MLP, ACT, diffusion; 96^2 images
    python benchmarks/call_shape.py --policies act --image 360 --max-rows 8 --repeats 3

For each policy (the fixture MLP, a LeRobot ACT with a ResNet18 backbone on two cameras, a LeRobot diffusion
policy with a ResNet18 encoder; random weights) run unpadded (``--call-width 0``), so a call of r rows is a
model call of r rows:

1. **bits**: rows 0..w-1 of one fixed pool in one call of w rows, for w = 1..``--max-rows``, forwards and
   reversed; each row compared with the same row computed alone (a call of width 1). Prints, per width, the
   largest difference from width 1 and whether the call's rows depend on their position.
2. **threads**: the same rows as one-row calls on ``--threads`` Python threads (a shallow policy copy each:
   shared weights, per-thread state; each thread with one intra-op torch thread), against serial one-row calls
   at the process's thread count: bit-identical or not.
3. **time** per call (median of ``--repeats``) at r = 1..``--max-rows`` rows: one call of r rows (unpadded),
   r serial one-row calls, and r one-row calls spread over the threads.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from random_lerobot import save_random_lerobot


def _save_lerobot(kind: str, directory: Path, image: int, cams: tuple[str, ...]) -> Path:
    return save_random_lerobot(kind, directory, cameras=tuple(f"observation.images.{c}" for c in cams), image=image,
                               diffusion_steps=ARGS.diffusion_steps)


def _policy(kind: str, tmp: Path) -> tuple[Any, tuple[str, ...]]:
    """The policy at ``--call-width 0`` and the cameras its observations carry."""
    from lerobench.policies.loading import load_policy
    from lerobench.policies.serve import suite_context

    base = suite_context("metaworld_mt10", call_width=0)
    if kind == "mlp":
        return load_policy("fixture_policies:make_mlp", base), ()
    cams = ("corner2", "topview") if ARGS.cameras == 2 else ("corner2",)
    path = _save_lerobot(kind, tmp / kind, ARGS.image, cams)
    context = base.__class__(**{**base.__dict__, "cameras": cams, "image_size": (ARGS.image, ARGS.image)})
    return load_policy(f"lerobot:{path}", context), cams


def _pool(rows: int, cams: tuple[str, ...]) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    obs: dict[str, Any] = {"state": rng.normal(size=(rows, 39)).astype(np.float32), "slot": np.arange(rows),
                           "episode_start": np.ones(rows, bool), "trial_start": np.ones(rows, bool),
                           "active": np.ones(rows, bool), "episode_seed": np.arange(rows) + 1,
                           "call": np.zeros(rows, np.int64), "task": ["reach-v3"] * rows}
    if cams:
        obs["images"] = {c: rng.integers(0, 255, (rows, ARGS.image, ARGS.image, 3), dtype=np.uint8) for c in cams}
    return obs


def _call(policy: Any, pool: dict[str, Any], index: np.ndarray) -> np.ndarray:
    from lerobench.policies.width import take_rows

    policy.reset()  # every row re-plans: one model call per call
    return np.asarray(policy.select_action(take_rows(pool, index), ["reach"] * len(index)), dtype=np.float64)


def _one_row_calls(policy: Any, pool: dict[str, Any], rows: list[int]) -> dict[int, np.ndarray]:
    return {r: _call(policy, pool, np.array([r]))[0] for r in rows}


def _threaded(policy: Any, pool: dict[str, Any], rows: int, threads: int) -> dict[int, np.ndarray]:
    """One-row calls of rows 0..rows-1 on ``threads`` threads, one shallow copy and one torch thread each."""
    import torch

    copies = [copy.copy(policy) for _ in range(threads)]

    def work(k: int) -> dict[int, np.ndarray]:
        torch.set_num_threads(1)  # per OS thread with the OpenMP backend
        return _one_row_calls(copies[k], pool, list(range(k, rows, threads)))

    with ThreadPoolExecutor(threads) as ex:
        parts = list(ex.map(work, range(threads)))
    return {r: v for part in parts for r, v in part.items()}


def _median(fn: Any) -> float:
    fn()  # warm-up
    times = []
    for _ in range(ARGS.repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def bits(kind: str, policy: Any, pool: dict[str, Any]) -> None:
    alone = _one_row_calls(policy, pool, list(range(ARGS.max_rows)))
    same, forwards = [], {}
    for w in range(1, ARGS.max_rows + 1):
        forward = _call(policy, pool, np.arange(w))
        backward = _call(policy, pool, np.arange(w)[::-1])[::-1]
        vs_one = max(_diff(forward[i], alone[i]) for i in range(w))
        position = _diff(forward, backward)
        if vs_one == 0:
            same.append(w)
        if position == 0:
            forwards[w] = forward
        print(f"| {kind} | {w} | {vs_one:.3g} | {position:.3g} |", flush=True)
    classes: list[list[int]] = []  # position-independent widths whose common rows agree bit for bit
    for w, out in forwards.items():
        home = next((c for c in classes if _diff(forwards[c[0]][:min(w, c[0])], out[:min(w, c[0])]) == 0), None)
        home.append(w) if home is not None else classes.append([w])
    print(f"# {kind}: widths whose rows equal width 1's: {same}; position-independent widths in classes of "
          f"equal rows: {classes}")


def threads(kind: str, policy: Any, pool: dict[str, Any]) -> None:
    import torch

    rows = min(ARGS.max_rows, 8)
    serial = _one_row_calls(policy, pool, list(range(rows)))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    serial1 = _one_row_calls(policy, pool, list(range(rows)))
    torch.set_num_threads(before)
    spread = _threaded(policy, pool, rows, ARGS.threads)
    d_threads = max(_diff(serial[r], serial1[r]) for r in range(rows))
    d_spread = max(_diff(serial[r], spread[r]) for r in range(rows))
    print(f"# {kind}: one-row calls, {before} vs 1 intra-op threads: max diff {d_threads:.3g}; "
          f"on {ARGS.threads} threads (1 intra-op each) vs serial: max diff {d_spread:.3g}", flush=True)


def timing(kind: str, policy: Any, pool: dict[str, Any]) -> None:
    for r in ARGS.rows:
        batched = _median(lambda r=r: _call(policy, pool, np.arange(r)))
        serial = _median(lambda r=r: _one_row_calls(policy, pool, list(range(r))))
        spread = _median(lambda r=r: _threaded(policy, pool, r, ARGS.threads))
        print(f"| {kind} | {r} | {batched * 1e3:.1f} | {serial * 1e3:.1f} | {spread * 1e3:.1f} | "
              f"{serial / batched:.2f} | {spread / batched:.2f} |", flush=True)


def main() -> None:
    import torch

    warnings.filterwarnings("ignore")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, images {ARGS.cameras} x "
          f"{ARGS.image}^2, diffusion {ARGS.diffusion_steps} steps, median of {ARGS.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        built = {}
        for kind in ARGS.policies.split(","):
            built[kind] = _policy(kind, Path(tmp))
        if "bits" in ARGS.parts:
            print("| policy | width | max diff from width 1 | max diff forwards vs reversed |\n|---|---|---|---|")
            for kind, (policy, cams) in built.items():
                bits(kind, policy, _pool(ARGS.max_rows, cams))
        if "threads" in ARGS.parts:
            for kind, (policy, cams) in built.items():
                threads(kind, policy, _pool(ARGS.max_rows, cams))
        if "time" in ARGS.parts:
            print(f"| policy | rows | one call ms | one-row calls ms | one-row calls on {ARGS.threads} threads ms "
                  "| serial / one call | threads / one call |\n|---|---|---|---|---|---|---|")
            for kind, (policy, cams) in built.items():
                timing(kind, policy, _pool(max(ARGS.rows), cams))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="mlp,act,diffusion")
    parser.add_argument("--parts", default="bits,threads,time")
    parser.add_argument("--image", type=int, default=96, help="camera images are IMAGE x IMAGE")
    parser.add_argument("--cameras", type=int, default=2, choices=(1, 2))
    parser.add_argument("--max-rows", type=int, default=16)
    parser.add_argument("--rows", default="1,2,4,8,16", help="row counts timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--diffusion-steps", type=int, default=10)
    ARGS = parser.parse_args()
    ARGS.rows = [int(x) for x in ARGS.rows.split(",")]
    main()
