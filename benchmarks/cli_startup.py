"""How long `lerobench list` takes against a bare typer + rich import (goal: at most 2.5x).

Prints the best and median wall time of each over N runs and their ratios. `list` reads the shipped
suites' TOML tables without validating them into `Suite` objects (`registry.suite_summaries`) and imports
no lerobench module beyond the CLI's own, `errors` and `registry` (tests/test_imports.py keeps it so); most
of what remains is typer's own parameter handling and rich drawing the table. Typer builds a pydantic
adapter for every option it processes (pydantic: ~60 ms); `cli/common.py` gives plain string options and
flags typer's pass-through instead, so `list` imports no pydantic.

    python benchmarks/cli_startup.py [N]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time


def timings(cmd: list[str], n: int) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system) of ``n`` runs of ``cmd`` (output discarded).

    CPU time is the steadier figure on a shared machine: waiting for a core does not count.
    """
    wall, cpu = [], []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    """Measure and print (runs of the two commands alternate, so load changes hit both alike)."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    runs: dict[str, tuple[list[float], list[float]]] = {"typer+rich import": ([], []), "lerobench list": ([], [])}
    commands = {"typer+rich import": [sys.executable, "-c", "import typer, rich.console, rich.table"],
                "lerobench list": [sys.executable, "-m", "lerobench", "list"]}
    for _ in range(n):
        for name, cmd in commands.items():
            wall, cpu = timings(cmd, 1)
            runs[name][0].extend(wall)
            runs[name][1].extend(cpu)
    for name, (wall, cpu) in runs.items():
        print(f"{name:18s} wall best {1000 * min(wall):6.1f} ms  median {1000 * statistics.median(wall):6.1f} ms"
              f"   cpu best {1000 * min(cpu):6.1f} ms  median {1000 * statistics.median(cpu):6.1f} ms")
    (bare_wall, bare_cpu), (list_wall, list_cpu) = runs.values()
    median = statistics.median
    print(f"ratio              wall best {min(list_wall) / min(bare_wall):.2f}x  median "
          f"{median(list_wall) / median(bare_wall):.2f}x   cpu best {min(list_cpu) / min(bare_cpu):.2f}x  median "
          f"{median(list_cpu) / median(bare_cpu):.2f}x  (goal <= 2.5x)")


if __name__ == "__main__":
    main()
