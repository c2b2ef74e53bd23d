"""The fixed facts of one task's rollout: made by the plan, read by the rollout (plain data, no stage)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lerobench.core.delay import Delay

if TYPE_CHECKING:
    from lerobench.suite.config import TaskSpec


class CheckedPolicies:
    """The policy objects a run has checked for batch invariance: each once, at its first call.

    The run's own bookkeeping (``RunPlan.checked``, handed to every task's rollout), not the process's: an object
    reused across ``lerobench.evaluate`` calls is checked in each run. A worker process that receives a plan starts
    its own (pickling keeps nothing), so each worker checks its own first call.
    """

    def __init__(self) -> None:
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def first(self, policy: Any) -> bool:
        """True the first time ``policy`` is asked about, then False.

        Always True for an object no weak reference can point to: its rollouts' first calls are each checked
        (still on episode starts).
        """
        with self._lock:
            try:
                if policy in self._seen:
                    return False
                self._seen.add(policy)
            except TypeError:
                pass
            return True

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


@dataclass(frozen=True)
class ScheduleRules:
    """The rollout schedule's decision rules (``lerobench.rollout.loop.Schedule``), passed in, never patched.

    None takes the rollout's own rule (``rollout.inference.should_call`` / ``worth_spreading``). A benchmark's
    lockstep baseline passes its own (``benchmarks/policy_latency.py``); a test may force envs out of phase.
    Module-level functions only where a run's work goes to worker processes (they are pickled with the plan).
    """

    should_call: Callable[[int | None, float | None, float | None, float], bool] | None = None
    """Send the dry rows now (``steps_to_next_dry`` None: nothing else can step), or keep stepping the others."""
    worth_spreading: Callable[[float | None, float | None, int, int], bool] | None = None
    """Run envs out of phase with overlapping calls (``call_s, wave_s, waves, replan_steps``)."""
    run_dry_first: bool = True
    """With overlapping calls, step only the rows nearest to running dry (False: never out of phase)."""


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
    policy_timeout_s: float | None = None
    """``--policy-timeout``: seconds a policy call may take (None: derived, ``lerobench.rollout.deadline``)."""
    stop: threading.Event | None = None
    """Set by the vector executor to make a task thread stop at its next step (Ctrl-C, another task failed)."""
    wants: Callable[[int], bool] | None = None
    """``--until``: False for an episode no longer worth starting (its task is decided); running ones finish."""
    checked: CheckedPolicies = field(default_factory=CheckedPolicies, repr=False, compare=False)
    """Which policy objects the run has checked (batch invariance, at each one's first call)."""
    schedule: ScheduleRules = ScheduleRules()
    """When to call and what to step (the rollout's own rules unless a caller passes others)."""
    delay: Delay = Delay()
    """``--delay-steps``: control steps each call covers (``lerobench.rollout.delay``); none by default."""
    seeds: str = "lerobench"
    """The protocol's seed scheme (``suite.config.Protocol.seeds``): how episode seeds follow from ``seed``."""

    def where(self, episode: int, message: str) -> str:
        """``message`` prefixed with suite, task and episode: what a user needs to find the failing case."""
        return f"suite {self.suite!r}, task {self.task.name!r}, episode {episode}: {message}"
