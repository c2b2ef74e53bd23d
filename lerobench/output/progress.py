"""Where progress goes: a protocol the CLI implements with rich, and a silent default for library use."""

from __future__ import annotations

from typing import Any, Protocol

from lerobench.core.records import EpisodeRecord
from lerobench.suite.config import TaskSpec


class Reporter(Protocol):
    """Where progress goes (the CLI draws it with rich; tests collect it)."""

    def message(self, text: str) -> None:
        """A one-line note (batch size choice, sequential fallback, rebuilt workers)."""

    def task_started(self, task: TaskSpec, total: int, done: int) -> None:
        """A task begins; ``done`` episodes were already finished (resume)."""

    def steps(self, task: TaskSpec, n: int) -> None:
        """``n`` env steps were taken."""

    def episode(self, task: TaskSpec, record: EpisodeRecord) -> None:
        """An episode's trial finished: every trial is reported (``record.trial``; trial 0 is the episode's rate)."""

    def task_finished(self, task: TaskSpec, summary: dict[str, Any]) -> None:
        """A task is complete."""


class SilentReporter:
    """Reports nothing."""

    def message(self, text: str) -> None:  # noqa: D102
        pass

    def task_started(self, task: TaskSpec, total: int, done: int) -> None:  # noqa: D102
        pass

    def steps(self, task: TaskSpec, n: int) -> None:  # noqa: D102
        pass

    def episode(self, task: TaskSpec, record: EpisodeRecord) -> None:  # noqa: D102
        pass

    def task_finished(self, task: TaskSpec, summary: dict[str, Any]) -> None:  # noqa: D102
        pass
