"""Memory a worker costs, measured per backend and per set of rendered cameras (issue 30).

The auto batch size divides the available memory by a worker's cost. It used to be a suite constant
(``worker_memory_mb``: 2,000-2,500 MB for LIBERO, 400 for Meta-World); now it is what ``benchmarks/memory.py``
measured: PSS (proportional set size, shared pages split between the processes mapping them) of a task's
process tree at 1, 2 and 4 workers, stepping with the cameras rendering. A worker's cost is two numbers:

- ``first_mb``: the whole tree with one worker (template process, imports, the task's scene and one worker);
- ``each_mb``: what every further worker adds (the slope from 1 to 4 workers). Workers forked from a task's
  template (``envs/template.py``) share the scene, so their ``each_mb`` is far below that of workers that
  build their task themselves (``own_each_mb``: the ``processes`` executor, ``LEROBENCH_SHARE_TASK=0``).

Renderer cost depends on whether a GL context exists and on the number of cameras, hardly on their size up to
640x480 (robosuite's offscreen buffer is allocated at that size whatever the camera size), so a camera set is
keyed by how many cameras render. A backend or camera count with no measurement falls back to the suite's
``worker_memory_mb``. ``HEADROOM`` covers growth over long episodes and the page cache a run's files use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HEADROOM = 1.25
"""The budget is the measured cost times this."""


@dataclass(frozen=True)
class WorkerMemory:
    """One measurement (MB PSS) and where it came from."""

    backend: str
    cameras: int
    first_mb: int
    each_mb: int
    own_each_mb: int
    source: str

    def budget_mb(self, shared: bool) -> int:
        """MB the auto batch size reserves per worker beyond the first (with headroom)."""
        return math.ceil((self.each_mb if shared else self.own_each_mb) * HEADROOM)

    def first_extra_mb(self, shared: bool) -> int:
        """MB the first worker costs beyond every further one: the template and the shared scene (with headroom)."""
        return max(0, math.ceil((self.first_mb - (self.each_mb if shared else self.own_each_mb)) * HEADROOM))

    def describe(self, shared: bool) -> str:
        """One phrase for ``doctor`` and the executor's explanation."""
        how = "forked from the task template" if shared else "each building its task"
        return (f"measured {self.backend} with {self.cameras} camera{'s' * (self.cameras != 1)}: "
                f"{self.first_mb} MB for the first worker, {self.each_mb if shared else self.own_each_mb} MB "
                f"each further worker ({how}); budget x{HEADROOM}")


_SOURCE = "benchmarks/memory.py, 2-core box, Mesa EGL (llvmpipe), MuJoCo 3.3.0, robosuite 1.4"
MEASURED: dict[tuple[str, int], WorkerMemory] = {
    (m.backend, m.cameras): m for m in (
        # libero_spatial task 0, two 256x256 cameras, 1 / 2 / 4 workers: 1,682 / 2,350 / 3,587 MB forked from the
        # template, 1,676 / 3,209 / 6,154 MB each building its own (8 workers: 5,902 against 12,011 MB)
        WorkerMemory("libero", 2, 1682, 635, 1493, _SOURCE),
        # no camera: 1,012 / 1,039 / 1,068 MB shared, 1,005 / 1,915 / 3,695 MB own
        WorkerMemory("libero", 0, 1012, 19, 897, _SOURCE),
        # metaworld_mt10 task 0, corner2 at 256x256: 404 / 592 / 974 MB shared, 363 / 639 / 1,139 MB own
        WorkerMemory("metaworld", 1, 404, 190, 259, _SOURCE),
        # no camera: 207 / 218 / 242 MB shared, 197 / 309 / 525 MB own
        WorkerMemory("metaworld", 0, 207, 12, 109, _SOURCE),
    )
}
"""(backend, rendered cameras) -> measurement; ``benchmarks/memory.py`` prints these numbers."""


def measured(backend: str, cameras: int) -> WorkerMemory | None:
    """The measurement for ``backend`` rendering ``cameras`` cameras: that count, else the nearest above, else below."""
    counts = sorted(c for b, c in MEASURED if b == backend)
    if not counts:
        return None
    above = [c for c in counts if c >= cameras]
    return MEASURED[(backend, above[0] if above else counts[-1])]


def budget(backend: str, cameras: int, available_mb: int | None, shared: bool,
           fallback_mb: int) -> tuple[int, int | None, str]:
    """(MB per worker, the memory left for workers after the first one's extra, why) for the auto batch size."""
    found = measured(backend, cameras)
    if found is None:
        left = None if available_mb is None else max(0, available_mb - fallback_mb)
        return fallback_mb, left, f"the suite's worker_memory_mb {fallback_mb} MB: nothing measured"
    left = None if available_mb is None else max(0, available_mb - found.first_extra_mb(shared))
    return found.budget_mb(shared), left, found.describe(shared)


def auto_batch(episodes: int, backend: str, cameras: int, cores: int, available_mb: int | None, shared: bool,
               fallback_mb: int) -> tuple[int, str]:
    """(batch size, why): usable cores, episodes per task, and 1 + (memory - first worker's extra) / each worker."""
    from lerobench.system import auto_batch_size

    per_worker, left, why = budget(backend, cameras, available_mb, shared, fallback_mb)
    choice = auto_batch_size(episodes, per_worker, cores=cores, memory_mb=None if left is None else left + per_worker,
                             probe=False)
    how = choice.explain()
    if available_mb is not None and left is not None:
        how = how.replace(f"{left + per_worker} MB available / {per_worker} MB per worker",
                          f"1 + ({available_mb} MB available - {available_mb - left} MB more for the first) / "
                          f"{per_worker} MB per further worker")
    return choice.batch_size, f"{how}; {why}"
