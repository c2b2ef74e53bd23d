"""Time the reset check (``lerobench.envs.resets``) over suites, and list the tasks whose reset is stale.

    python benchmarks/reset_sweep.py metaworld_mt50 libero_spatial --size 32 --processes 2

Prints one line per task that fails, then per suite: tasks, failures, wall seconds. The test suite runs the
same sweep over all 50 Meta-World tasks and the 130 tasks of the five LIBERO suites (tests/test_resets.py).
"""

from __future__ import annotations

import argparse
import time

from lerobench.envs.resets import check_resets, reset_specs
from lerobench.suite.registry import load_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=None, help="only the first N tasks of each suite")
    parser.add_argument("--backend", default=None, help="another backend for the suites (module:ATTR)")
    parser.add_argument("--cameras", default=None, help="comma-separated cameras (default: the protocol's)")
    args = parser.parse_args()
    for name in args.suites:
        suite = load_suite(name)
        if args.backend:
            from dataclasses import replace

            suite = replace(suite, backend=args.backend)
        cameras = [c for c in args.cameras.split(",") if c] if args.cameras is not None else None
        specs = reset_specs(suite, (args.size, args.size), cameras=cameras)[: args.tasks]
        started = time.perf_counter()
        failed = 0
        for check in check_resets(specs, steps=args.steps, processes=args.processes):
            if not check.ok:
                failed += 1
                print(check.describe(), flush=True)
        took = time.perf_counter() - started
        print(f"{name}: {len(specs)} tasks, {failed} stale, {took:.1f} s at {args.size}x{args.size}, "
              f"{args.processes} processes, {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
