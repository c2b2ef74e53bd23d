"""The fixed facts of one task's rollout: made by the plan, read by the rollout (plain data, no stage)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lerobench.core.delay import Delay

if TYPE_CHECKING:
    from lerobench.suite.config import TaskSpec


@dataclass
class TaskRun:
    """The fixed facts of one task's rollout."""

    suite: str
    task: TaskSpec
    seed: int
    action_dim: int
    replan_steps: int = 1
    trials: int = 1
    """Attempts per episode at the same start (``--trials``); the policy keeps its memory between them."""
    every_frame: bool = False
    """Render the policy's cameras at every step, also those whose observation the policy never reads."""
    n_init_states: int = 50
    step_timeout_s: float | None = None
    stop: threading.Event | None = None
    """Set by the vector executor to make a task thread stop at its next step (Ctrl-C, another task failed)."""
    wants: Callable[[int], bool] | None = None
    """``--until``: False for an episode no longer worth starting (its task is decided); running ones finish."""
    delay: Delay = Delay()
    """``--delay-steps``: control steps each call covers (``lerobench.rollout.delay``); none by default."""

    def where(self, episode: int, message: str) -> str:
        """``message`` prefixed with suite, task and episode: what a user needs to find the failing case."""
        return f"suite {self.suite!r}, task {self.task.name!r}, episode {episode}: {message}"
