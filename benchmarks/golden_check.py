"""How long the simulator fingerprint's golden-state check takes: first time in an environment, then cached.

Usage: MUJOCO_GL=egl python benchmarks/golden_check.py [metaworld] [libero]
Prints one line per backend: uncached seconds (a fresh cache directory), cached seconds, and the status.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from lerobench.envs.fingerprint import fingerprint
from lerobench.suite.registry import get_backend


def main(backends: list[str]) -> None:
    """Time each backend's check with an empty cache, then again from the cache."""
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LEROBENCH_CACHE_DIR"] = cache
        for name in backends:
            packages = get_backend(name).packages
            start = time.perf_counter()
            first = fingerprint(name, packages)
            uncached = time.perf_counter() - start
            start = time.perf_counter()
            fingerprint(name, packages)
            cached = time.perf_counter() - start
            print(f"{name}: uncached {uncached:.2f} s, cached {cached * 1000:.1f} ms, "
                  f"status {first['golden']['status']} (MUJOCO_GL={os.environ.get('MUJOCO_GL')})")


if __name__ == "__main__":
    main(sys.argv[1:] or ["metaworld", "libero"])
