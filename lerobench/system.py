"""How much of this machine the run may use: cores (affinity + cgroup quota) and memory."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AutoBatchSize:
    """The auto-tuned batch size and the numbers it came from (printed so users can see why)."""

    batch_size: int
    usable_cores: int
    available_mb: int | None
    worker_memory_mb: int
    episodes_per_task: int

    def explain(self) -> str:
        """One sentence saying which limit decided the batch size."""
        cores, episodes = self.usable_cores, self.episodes_per_task
        limits = [f"{cores} usable core{'s' * (cores != 1)}", f"{episodes} episode{'s' * (episodes != 1)} per task"]
        if self.available_mb is not None:
            limits.append(f"{self.available_mb} MB available / {self.worker_memory_mb} MB per worker")
        return f"batch size {self.batch_size} (min of {', '.join(limits)})"


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPU quota in cores from cgroup v2 ``cpu.max`` or v1 ``cfs_quota/period``; None if unlimited."""
    v2 = root / "cpu.max"
    try:
        quota, period = v2.read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cores(affinity: set[int] | None = None, quota: float | None = None, *, probe: bool = True) -> int:
    """Cores this process may really use: CPU affinity, capped by the cgroup quota (rounded up)."""
    if affinity is None and probe:
        try:
            affinity = os.sched_getaffinity(0)
        except AttributeError:  # pragma: no cover - macOS/Windows
            affinity = set(range(os.cpu_count() or 1))
    if quota is None and probe:
        quota = cgroup_cpu_limit()
    cores = len(affinity) if affinity else (os.cpu_count() or 1)
    if quota is not None and quota > 0:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def available_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` in MB, or None where /proc/meminfo does not exist."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def auto_batch_size(
    episodes_per_task: int,
    worker_memory_mb: int,
    *,
    cores: int | None = None,
    memory_mb: int | None = None,
    probe: bool = True,
) -> AutoBatchSize:
    """Workers per task: usable cores, capped by episodes per task and by memory / per-worker memory."""
    cores = cores if cores is not None else usable_cores(probe=probe)
    if memory_mb is None and probe:
        memory_mb = available_memory_mb()
    batch = min(cores, episodes_per_task)
    if memory_mb is not None:
        batch = min(batch, max(1, memory_mb // max(1, worker_memory_mb)))
    return AutoBatchSize(max(1, batch), cores, memory_mb, worker_memory_mb, episodes_per_task)


MKL_CBWR = "AUTO,STRICT"
"""MKL's reproducibility mode lerobench asks for: the best code path for this CPU, strict across thread counts
(why: ``lerobench/policies/kernels.py``)."""

CLI_MKL_MODE = "strict"
"""MKL's mode as ``policies.kernels.mkl_mode`` names it when ``MKL_CBWR`` is ``MKL_CBWR`` above: the ``lerobench``
command's, recorded in ``results.json`` ``config.numerics.mkl``."""

MKL_MATCH = (f"set MKL_CBWR={MKL_CBWR} before Python starts (in the shell: `MKL_CBWR={MKL_CBWR} python train.py`; "
             f"MKL reads it once, at its first call, so setting os.environ later changes nothing)")
"""How a caller's process computes as the ``lerobench`` command does: said by ``evaluate``'s warning and ``compare``."""


def mkl_modes_differ(a: str | None, b: str | None) -> bool:
    """Whether two recorded MKL modes (``config.numerics.mkl``) are known and different.

    ``none`` (no MKL), ``unknown`` (not reachable) and missing (not a CPU torch policy, an older file) say nothing.
    """
    silent = (None, "none", "unknown")
    return a not in silent and b not in silent and a != b


def strict_mkl_default() -> None:
    """Ask for MKL's strict reproducibility mode before MKL starts (a user's own ``MKL_CBWR`` wins).

    Called by the ``lerobench`` command at its start (its own process; workers inherit it), never on import or
    by ``lerobench.evaluate``: MKL reads the variable once, at its first call in the process, and a mode cannot
    be switched back, so setting it in a user's process would change their numerics for good.
    """
    from lerobench import environment

    environment.set_default(environment.MKL_CBWR, MKL_CBWR)



_M_ARENA_MAX = -8  # glibc's malloc.h


def bounded_malloc_arenas(arenas: int | None = None) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (default: the usable cores, at least 2) for this process.

    Why: glibc gives threads up to 8 arenas per core, and a long-lived thread keeps its own arena's peak
    resident after freeing it. The command's call threads and torch's intra-op threads each kept a policy
    call's activations (ALOHA's ACT, 480x640: ~55 MB each); sharing arenas lets one thread reuse what another
    freed. Measured: 4 threads taking turns with 8 MB keep 32 MB resident under glibc's default, 8 MB with 2
    arenas (tests/test_process_state.py); two ACT calls side by side took the same time either way. Called by
    the ``lerobench`` command for its own process before any thread starts, never on import or by
    ``lerobench.evaluate``; a user's ``MALLOC_ARENA_MAX`` wins. Returns whether it applied (glibc only).
    """
    from lerobench import environment

    if environment.get(environment.MALLOC_ARENA_MAX):
        return False
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_ARENA_MAX, arenas or max(2, usable_cores())))
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator as it is
        return False
