"""The executor interface: run a plan's work units, hand every finished episode to the sink."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lerobench.execution.compute import ComputeBudget
from lerobench.output.sink import EpisodeSink
from lerobench.plan.planner import RunPlan, WorkUnit

MAX_WORKER_REBUILDS = 3
"""Worker deaths within one task before the run is stopped (a crash that repeats is not bad luck)."""


class Executor(Protocol):
    """Runs work units; returns when every unit's episodes reached the sink, raises to stop the run.

    On any exception (Ctrl-C included) an executor stops its workers before it returns: no simulator
    process, thread or Ray task outlives ``run``.
    """

    name: str

    def run(self, plan: RunPlan, units: list[WorkUnit], sink: EpisodeSink) -> None:
        """Run ``units``; every episode ends as one ``sink.episode`` call (an error record if it was lost)."""


@dataclass(frozen=True)
class ExecutionChoice:
    """Which executor runs the plan, its size, and a sentence saying why (printed)."""

    executor: str
    """inline, vector, processes or ray."""
    reason: str
    batch_size: int = 1
    """Envs per task stepped together (``--batch-size``; inline and vector): the rollout's slots."""
    workers: int = 0
    """Worker processes (processes) or concurrent Ray tasks (ray; 0: as many as the cluster schedules), each running
    whole episodes with its own policy (``--workers``). 0 for the batched executors."""
    parallel_tasks: int = 1
    """Task threads (vector executor only)."""
    compute: ComputeBudget | None = None
    """The run's compute budget (``execution/compute.py``), set by the runner once the choice is final."""

    @property
    def in_flight(self) -> int:
        """Episodes run at once per task: the batch for batched executors, else the workers."""
        return self.workers or self.batch_size
