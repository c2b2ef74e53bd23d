"""Every executor as one registry entry: where its class lives and the facts the planner and runner need.

Adding an executor is its module plus one entry here; nothing else checks executor names. The facts are
declared (never probed on the executor object) and this module imports no executor, so ``plan.py`` can
validate flags against them without importing the executors (which import the plan).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecutorEntry:
    """One executor: its class (``module:Class`` with a ``create(plan, choice, policy)`` classmethod) and facts."""

    name: str
    target: str
    own_policy: bool
    """Each worker builds its own policy copy: the driver's copy is closed, and ``--record`` (written by the
    driver's sink) is refused."""
    batched: bool
    """``--batch-size`` applies (envs sharing the driver's policy)."""
    task_threads: bool = False
    """``--parallel-tasks`` applies (task threads, each with a shallow copy of the driver's policy)."""
    step_timeouts: bool = True
    """``--episode-timeout`` can be enforced (steps run in worker processes that can be abandoned)."""
    one_episode_units: bool = False
    """Work units of one episode each (workers pull episodes), instead of one unit per task."""
    requires: str | None = None
    """Module that must be importable, and the pip extra that installs it."""
    extra: str | None = None

    def load(self) -> Any:
        """The executor class (imported now)."""
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


EXECUTORS: dict[str, ExecutorEntry] = {
    "inline": ExecutorEntry("inline", "lerobench.execution.inline:InlineExecutor", own_policy=False, batched=True,
                            step_timeouts=False),
    "vector": ExecutorEntry("vector", "lerobench.execution.vector:VectorExecutor", own_policy=False, batched=True,
                            task_threads=True),
    "processes": ExecutorEntry("processes", "lerobench.execution.processes:ProcessExecutor", own_policy=True,
                               batched=False, one_episode_units=True),
    "ray": ExecutorEntry("ray", "lerobench.execution.ray_cluster:RayExecutor", own_policy=True, batched=False,
                         requires="ray", extra="ray"),
}
"""Executors by ``--executor`` name (docs/scaling.md); ``auto`` picks one of them (``execution/auto.py``)."""

CHOICES = ("auto", *EXECUTORS)
"""Values of ``--executor``."""
