"""How long `lerobench list` takes against a bare typer + rich import (goal: at most 2.5x).

Prints the best and median wall time of each over N runs and their ratios. `list` reads the shipped
suites' TOML tables without validating them into `Suite` objects (`registry.suite_summaries`); most of
what remains is typer's own parameter processing (it imports pydantic) and rich.

    python benchmarks/cli_startup.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def timings(cmd: list[str], n: int) -> list[float]:
    """Wall seconds of ``n`` runs of ``cmd`` (output discarded)."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    """Measure and print."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    bare = timings([sys.executable, "-c", "import typer, rich.console, rich.table"], n)
    listing = timings([sys.executable, "-m", "lerobench", "list"], n)
    for name, ts in (("typer+rich import", bare), ("lerobench list", listing)):
        print(f"{name:18s} best {1000 * min(ts):6.1f} ms  median {1000 * statistics.median(ts):6.1f} ms")
    print(f"ratio              best {min(listing) / min(bare):.2f}x  median "
          f"{statistics.median(listing) / statistics.median(bare):.2f}x  (goal <= 2.5x)")


if __name__ == "__main__":
    main()
