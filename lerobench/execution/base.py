"""The executor interface: run a plan's work units, hand every finished episode to the runner's ``RunIO``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from lerobench.core.call_stats import CallStats
from lerobench.core.progress import episode_progress
from lerobench.core.records import EpisodeRecord
from lerobench.execution.compute import ComputeBudget
from lerobench.output.media import RunMedia
from lerobench.output.progress import Reporter
from lerobench.output.sink import EpisodeSink
from lerobench.plan.planner import RunPlan, WorkUnit
from lerobench.plan.stopping import Ledger, NoStopping
from lerobench.policies.width import keeps_positions, width_advice
from lerobench.suite.config import TaskSpec

MAX_WORKER_REBUILDS = 3
"""Worker deaths within one task before the run is stopped (a crash that repeats is not bad luck)."""


class Executor(Protocol):
    """Runs work units; returns when every unit's episodes reached the sink, raises to stop the run.

    On any exception (Ctrl-C included) an executor stops its workers before it returns: no simulator
    process, thread or Ray task outlives ``run``.
    """

    name: str

    def run(self, plan: RunPlan, units: list[WorkUnit], io: RunIO) -> None:
        """Run ``units``; every episode ends as one ``io.episode`` call (an error record if it was lost)."""


@dataclass
class RunIO:
    """What an executor is handed with the plan, from the runner: one door for records, one question, media.

    ``episode`` hands a finished trial to the stopping rule (consulted here, by the runner's side, never through
    the writer) and then to the sink (which only writes); ``wants`` asks the rule whether an episode is still
    worth starting; ``media`` makes the recorders (``output/media.py``); ``calls`` is where the driver's policy
    callers add their statistics (``rollout/inference.py``).
    """

    sink: EpisodeSink
    stopping: Ledger | NoStopping
    media: RunMedia
    calls: CallStats
    _warned_check: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def reporter(self) -> Reporter:
        """The progress display (messages to the user)."""
        return self.sink.reporter

    def replay(self, records: list[EpisodeRecord]) -> None:
        """Feed a resumed run's earlier records to the stopping rule, in episode-index order."""
        for r in sorted(records, key=lambda r: r.episode):
            if r.trial == 0:
                self.stopping.add(r.task, r.episode, r.success, episode_progress(r))

    def wants(self, task: str, episode: int) -> bool:
        """Whether episode ``episode`` of ``task`` is still worth starting (False once ``--until`` decided it)."""
        return self.stopping.wants(task, episode)

    def task_started(self, task: TaskSpec) -> None:
        """An executor starts work on ``task`` (idempotent)."""
        self.sink.task_started(task)

    def steps(self, task: TaskSpec, n: int) -> None:
        """``n`` env steps were just taken on ``task`` in this process."""
        self.sink.steps(task, n)

    def episode(self, task: TaskSpec, record: EpisodeRecord, count_steps: bool = False) -> None:
        """One finished trial: the stopping rule learns trial 0's outcome, then the sink writes it."""
        if record.trial == 0:
            with self._lock:
                differs = self.stopping.same_inputs(record)
                self.stopping.add(task.name, record.episode, record.success, episode_progress(record))
            if differs is not None:
                self.reporter.message(f"warning: {differs}")
        self._warn_failed_check(task, record)
        self.sink.episode(task, record, count_steps=count_steps)

    def _warn_failed_check(self, task: TaskSpec, record: EpisodeRecord) -> None:
        """One line, once per run, when a batch-invariance check failed: the numbers depend on the schedule."""
        check = record.policy_check
        with self._lock:
            if not check or check.get("status") != "failed" or self._warned_check:
                return
            self._warned_check = True
        width = (self.sink.plan.policy_facts or {}).get("call_width")
        reason = check.get("reason")
        if width is not None and width > 1 and not keeps_positions(width) and check.get("max_abs_diff"):
            reason = (f"a row's action changed by up to {check['max_abs_diff']:.3g} with other rows beside it; "
                      f"{width_advice(width)}")  # the cause at this width, not the probe's list of guesses
        self.reporter.message(
            f"warning: batch invariance failed on task {task.name!r} ({reason}): this run's "
            "per-episode numbers depend on --batch-size, executor and timing; run `lerobench check-policy"
            + (f" --call-width {width}" if width is not None else "") + "` on this policy to measure it "
            "and see docs/policies.md#batch-invariance")


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
