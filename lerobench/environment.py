"""Every environment variable lerobench reads or sets, in one module (issue 47).

Why one module: what a process's environment can change about a run is then one file to read, and a test holds
the rule (no ``os.environ`` anywhere else in the package). Reading goes through ``get`` and the named accessors;
setting through three doors only: ``set_default`` (a worker's or the command's own start-up: a value the user set
wins), ``scoped`` (set for a block, then put back) and ``preserved`` (whatever a block set, put back).
``VARIABLES`` lists each name with what it changes; docs/usage.md's table shows them all (a test compares).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

MUJOCO_GL = "MUJOCO_GL"
PYOPENGL_PLATFORM = "PYOPENGL_PLATFORM"
CACHE_DIR = "LEROBENCH_CACHE_DIR"
GOLDEN_DIR = "LEROBENCH_GOLDEN_DIR"
SHARE_TASK = "LEROBENCH_SHARE_TASK"
CALL_CORES = "LEROBENCH_CALL_CORES"
RENDER_THREADS = "LP_NUM_THREADS"
MKL_CBWR = "MKL_CBWR"
CUBLAS_WORKSPACE = "CUBLAS_WORKSPACE_CONFIG"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
RENDER_QUALITY = "LEROBENCH_RENDER_QUALITY"
SHARE_RENDERER = "LEROBENCH_SHARE_RENDERER"
SHADER_CACHE_OFF = "MESA_SHADER_CACHE_DISABLE"
MALLOC_ARENA_MAX = "MALLOC_ARENA_MAX"

VARIABLES = {
    MUJOCO_GL: "read: MuJoCo's GL backend (egl for headless rendering); recorded in results.json",
    PYOPENGL_PLATFORM: "read: PyOpenGL's platform (robosuite/LIBERO); part of the fingerprint cache key",
    CACHE_DIR: "read: lerobench's cache folder (default $XDG_CACHE_HOME/lerobench or ~/.cache/lerobench)",
    "XDG_CACHE_HOME": "read: the base of the default cache folder",
    GOLDEN_DIR: "read: golden files to check the simulator against instead of the shipped ones",
    SHARE_TASK: "read: 0 or 1 overrides --share-task (task template processes)",
    SHARE_RENDERER: "read: 0 keeps each worker's own GL context (not the task template's; docs/scaling.md)",
    SHADER_CACHE_OFF: "set in a task template process while it makes the GL context its workers share, then put back",
    RENDER_QUALITY: "read: the render quality of a run given no --render-quality (published or draft); recorded",
    CALL_CORES: "read: the policy call pool's cores, instead of the run's compute budget (execution/compute.py)",
    RENDER_THREADS: "set in worker processes at their start (the compute budget's render threads); yours wins; "
                    "0 in a task template while it makes the GL context its workers share",
    MALLOC_ARENA_MAX: "read: glibc's arena cap; if set, the lerobench command leaves its own cap (the usable cores) "
                      "unset (system.bounded_malloc_arenas)",
    MKL_CBWR: "set by the lerobench command at its start (MKL's strict reproducible mode); yours wins",
    CUBLAS_WORKSPACE: "set while a torch policy runs deterministic numerics (cuBLAS), then put back",
    HF_HUB_OFFLINE: "set while LeRobot is imported (nothing is downloaded), then put back by evaluate()",
    "MLFLOW_ALLOW_FILE_STORE": "set while MLflow's file store opens (--log-to mlflow), then put back",
    "MLFLOW_TRACKING_URI": "read: MLflow's server instead of a file store (--log-to mlflow)",
    "WANDB_DIR": "read: where W&B writes (--log-to wandb)",
    "WANDB_MODE": "read: W&B's mode (default offline)",
    "TRACKIO_DIR": "read: where Trackio writes (--log-to trackio)",
}
"""Every variable lerobench reads or sets, with what it does (docs/usage.md, "Environment variables")."""


def get(name: str, default: str | None = None) -> str | None:
    """The variable's value in this process, or ``default``."""
    return os.environ.get(name, default)


def snapshot() -> dict[str, str]:
    """A copy of this process's whole environment (handed to a child process, or a key of what was built)."""
    return dict(os.environ)


def set_default(name: str, value: str) -> None:
    """Set ``name`` unless it is set: in a worker's own start-up or the command's, never in a user's process."""
    os.environ.setdefault(name, value)


def adopt(values: dict[str, str]) -> None:
    """Take the driver's environment in a worker started before it changed (``execution/processes.py``)."""
    os.environ.update(values)


@contextlib.contextmanager
def scoped(name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` for the block, then as it was (unset if it was)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        restore(name, before)


def restore(name: str, value: str | None) -> None:
    """Put ``name`` back to ``value`` (None: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextlib.contextmanager
def preserved() -> Iterator[None]:
    """Put the whole environment back as it was, whatever the block set (``lerobench.evaluate``).

    A run sets variables in its own processes only, but libraries it drives set some in the caller's: torch's
    ``use_deterministic_algorithms`` imports inductor, which sets ``TORCHINDUCTOR_CACHE_DIR``; the LeRobot adapter
    sets ``HF_HUB_OFFLINE`` while it imports; ``CUBLAS_WORKSPACE_CONFIG`` is set for cuBLAS's determinism
    (``policies/numerics.py``). The caller's environment is theirs: every key is restored or removed.
    """
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def cache_dir() -> Path:
    """``LEROBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/lerobench``, else ``~/.cache/lerobench``."""
    if get(CACHE_DIR):
        return Path(str(get(CACHE_DIR)))
    return Path(get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "lerobench"


def share_task_override() -> bool | None:
    """``LEROBENCH_SHARE_TASK``: 0 or 1 overrides the run's setting; None when unset or anything else."""
    value = (get(SHARE_TASK) or "").strip()
    return value == "1" if value in ("0", "1") else None


def share_renderer_allowed() -> bool:
    """``LEROBENCH_SHARE_RENDERER``: anything but ``0`` lets workers render with their task template's GL context."""
    return (get(SHARE_RENDERER) or "").strip() != "0"


def call_cores() -> int | None:
    """``LEROBENCH_CALL_CORES``: this process's share of the cores for policy calls; None when unset."""
    value = get(CALL_CORES) or ""
    return max(1, int(value)) if value.isdigit() else None
