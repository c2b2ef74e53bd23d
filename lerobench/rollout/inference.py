"""Policy calls of one task's rollout: where the next episode comes from, when to call, calls beside the simulation.

Calls run on a helper thread beside the stepping, only dry rows are sent, and when to send trades batch
fullness against idle envs (``should_call``; ``worth_spreading`` for overlapping calls): the why and the
measurements are in docs/policies.md ("Continuous batching"), the one place that explains it. Each row is in
exactly one call per chunk it executes, so per-episode outcomes do not depend on the timing.

The rollout asks an ``EpisodeSource`` for each slot's next episode: by default the task's episodes in
index order; a sequential stopping rule (``eval --until``) replaces it with a source that returns None
once the task is decided.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lerobench.core.call_stats import CallStats
from lerobench.policies.base import Policy, policy_numerics, policy_traits
from lerobench.policies.batch import as_batch
from lerobench.policies.invariance import PendingCheck, checked_call
from lerobench.rollout.deadline import WAITING, CallDeadline, WaitingCall


@runtime_checkable
class EpisodeSource(Protocol):
    """Hands out the episodes a rollout runs, one at a time."""

    def next(self) -> int | None:
        """The next episode index to start, or None when no more should start (the slot goes idle)."""


class EpisodeQueue:
    """The default source: a fixed list of episodes, in order, less those a stopping rule no longer wants.

    ``wants`` (``TaskRun.wants``, from ``eval --until``) is asked just before an episode would start, so a task
    decided meanwhile starts nothing more; episodes already running finish and are recorded.
    """

    def __init__(self, episodes: Iterable[int], wants: Callable[[int], bool] | None = None):
        self._pending = deque(episodes)
        self._wants = wants
        self._lock = threading.Lock()

    def next(self) -> int | None:
        """The next listed episode still wanted, or None once none is left."""
        with self._lock:
            while self._pending:
                episode = self._pending.popleft()
                if self._wants is None or self._wants(episode):
                    return episode
            return None


MIN_SPREAD_GAIN = 1.2
"""Run envs out of phase only where that is expected to raise env-steps/s at least this much (``worth_spreading``)."""


def worth_spreading(call_s: float | None, wave_s: float | None, waves: int, replan_steps: int) -> bool:
    """Whether to run envs out of phase with overlapping calls, rather than in step with one full call per round.

    In phase, a round takes a call plus every env's ``replan_steps`` steps (the actions it executes per call):
    ``T_all = waves * replan_steps * wave_s`` (one wave of steps per ``concurrent_steps`` envs). Out of phase,
    each env waits only for its own call while the others step, so a round takes the longer of a call plus one
    wave's ``replan_steps`` steps (``T_one``) and ``T_all`` (the simulation is then always busy), but every env is
    its own call. The gain ``(call + T_all) / max(call + T_one, T_all)`` is 1 for a free call, peaks (up to 2x)
    when a call costs about a round of simulation, and falls back to 1 when the policy dominates; below
    ``MIN_SPREAD_GAIN`` the few, full calls of the in-phase schedule are worth more. Unknown costs: stay in phase.
    """
    if call_s is None or wave_s is None or waves < 2:
        return False
    t_one = replan_steps * wave_s
    t_all = waves * t_one
    return call_s + t_all >= MIN_SPREAD_GAIN * max(call_s + t_one, t_all)


def should_call(steps_to_next_dry: int | None, step_s: float | None, budget_s: float | None,
                waited_s: float = 0.0) -> bool:
    """Send the dry rows now (True), or keep stepping the others until more rows run dry (False).

    Send once the dry rows' wait (``waited_s`` so far plus ``steps_to_next_dry`` steps of ``step_s``) would
    reach ``budget_s`` (``PolicyCaller.budget_s``). ``steps_to_next_dry`` is None when no env can step
    (waiting gains nothing). Until the costs are measured the rows are sent at once.
    """
    if steps_to_next_dry is None or step_s is None or budget_s is None:
        return True
    return waited_s + steps_to_next_dry * step_s >= budget_s


class Average:
    """Exponential moving average of a duration; None until the first sample."""

    def __init__(self, weight: float = 0.2):
        self.value: float | None = None
        self._weight = weight

    def add(self, sample: float) -> None:
        """Fold in one measured duration."""
        self.value = sample if self.value is None else self.value + self._weight * (sample - self.value)


Answer = Callable[[np.ndarray, Any, BaseException | None], None]
"""Receives a finished call: its rows, the policy's output (None on error) and the exception (None if fine)."""


class CallOverdue(Exception):  # noqa: N818 - a state, raised once
    """A policy call passed its deadline (``lerobench.rollout.deadline``); the rollout names the episode."""

    def __init__(self, rows: np.ndarray, number: int, waited_s: float, limit_s: float, source: str,
                 stack: str | None = None):
        super().__init__(f"policy call {number} has not returned after {waited_s:.0f} s (deadline {limit_s:g} s, "
                         f"{source})")
        self.rows, self.number, self.waited_s, self.limit_s = rows, number, waited_s, limit_s
        self.stack = stack
        """Where the call's thread was when the deadline passed (for traceback.txt): where the policy hangs."""


def thread_stack(ident: int | None) -> str | None:
    """The current stack of thread ``ident``, formatted like a traceback; None if it is gone."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    return None if frame is None else "".join(traceback.format_stack(frame))


class CallThreads:
    """Daemon threads that run policy calls: a call that never returns cannot keep the process from exiting.

    Why not ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so one hung call would hang
    the run after it had reported the hang. A hand-off costs ~25 us (measured on this 2-core box).
    """

    def __init__(self, count: int):
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"lerobench-policy-{i}", daemon=True)
                         for i in range(count)]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            future.thread_ident = threading.get_ident()  # type: ignore[attr-defined]  # named if the call hangs
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to whoever collects the call
                    future.set_exception(exc)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` on a free thread."""
        future: Future[Any] = Future()
        self._jobs.put((future, fn, args))
        return future

    def stop(self, join: bool = True) -> None:
        """End the threads once their calls return; ``join=False`` abandons them (a hung call: they are daemons)."""
        for _ in self._threads:
            self._jobs.put(None)
        if join:
            for thread in self._threads:
                thread.join()


@dataclass
class _Flight:
    """One call in flight."""

    rows: np.ndarray
    future: Future[Any]
    number: int
    started: float
    limit_s: float
    waiting_key: int


class PolicyCaller:
    """Runs ``select_action`` for sub-batches on helper threads (at most ``concurrency`` in flight).

    Every call runs on a helper thread, so the rollout can give up on one that passes its deadline
    (``deadline``; ``CallOverdue``); the rollout keeps stepping other rows meanwhile where it can.
    ``concurrency`` > 1 only for policies that declare ``PolicyTraits.concurrent_calls`` (their calls on
    disjoint rows may overlap: a remote server, a latency-bound model). ``close`` waits for calls in flight
    that are still within their deadline, so none outlives the rollout unless it hung.
    """

    def __init__(self, policy: Policy, stats: CallStats | None = None, concurrency: int = 1, check: bool = False,
                 deadline: CallDeadline | None = None, describe: Callable[[np.ndarray], str] | None = None):
        self.policy = policy
        self._check_next = check and policy_traits(policy).checkable
        self.check: PendingCheck | None = None
        """The batch-invariance check of this caller's first call (``lerobench.policies.invariance``), until taken;
        its probe calls may still run beside the next steps."""
        self.stats = stats if stats is not None else CallStats()
        self.concurrency = max(1, concurrency)
        self.call_s = Average()
        """Time of one call (measured here, on whichever thread runs it); the step timings are ``Schedule``'s."""
        self.slowest_s: float | None = None
        """The slowest call so far: what the derived deadline scales."""
        self.deadline = deadline or CallDeadline()
        self._describe = describe or (lambda rows: f"rows {rows.tolist()}")
        self._threads: CallThreads | None = None
        self._flights: list[_Flight] = []
        self._calls = 0
        self._hung = False
        self._width = (policy_numerics(policy) or {}).get("call_width")
        """The torch policy's call width (None for other policies): what ``CallStats`` prices."""

    @property
    def busy(self) -> bool:
        """A call is in flight."""
        return bool(self._flights)

    @property
    def budget_s(self) -> float | None:
        """How long dry rows may wait for others (``should_call``): a call (the next row would wait for one)."""
        return self.call_s.value

    def slots_free(self, limit: int) -> bool:
        """Fewer than ``limit`` calls (at most ``concurrency``) are in flight: another may start."""
        return len(self._flights) < min(limit, self.concurrency)

    def _timed(self, rows: dict[str, Any], descriptions: list[str]) -> Any:
        batch = as_batch(rows)  # the typed batch a policy receives (policies/batch.py)
        if self._check_next:  # the first call: its rows again in probe calls on twins of the policy
            self._check_next = False
            out, self.check = checked_call(self.policy, batch, descriptions)
            self.stats.add(len(batch["state"]), self.check.call_s, self._width)
            return out
        started = time.perf_counter()
        try:
            return self.policy.select_action(batch, descriptions)
        finally:
            took = time.perf_counter() - started
            self.call_s.add(took)
            self.slowest_s = took if self.slowest_s is None else max(self.slowest_s, took)
            self.stats.add(len(batch["state"]), took, self._width)

    def take_check(self) -> dict[str, Any] | None:
        """The first call's check, once (the rollout stamps it on the next record it reports).

        Waits for its probe calls, which the call statistics then count.
        """
        pending, self.check = self.check, None
        if pending is None:
            return None
        check = pending.result()
        self.stats.add_probes(int(check.get("probe_calls") or 0), int(check.get("probe_rows") or 0),
                              float(check.get("probe_s") or 0.0))
        return check

    def call(self, rows: np.ndarray, batch: dict[str, Any], descriptions: list[str], answer: Answer) -> None:
        """Run one call now (nothing else can step meanwhile) and hand its result to ``answer``.

        It still runs on a helper thread (~25 us a call), so a call past its deadline raises ``CallOverdue``.
        """
        assert not self._flights, "PolicyCaller.call with a call in flight"
        self.submit(rows, batch, descriptions)
        while self._flights:
            self.collect(answer, block=True)

    def submit(self, rows: np.ndarray, batch: dict[str, Any], descriptions: list[str]) -> None:
        """Start one call on a helper thread; ``collect`` hands its result over once it is done."""
        assert self.slots_free(self.concurrency), "PolicyCaller.submit with every call slot in flight"
        if self._threads is None:
            self._threads = CallThreads(self.concurrency)
        self._calls += 1
        now = time.perf_counter()
        limit = self.deadline.limit_s(self.slowest_s)
        key = WAITING.add(WaitingCall(f"call {self._calls}, {self._describe(rows)}", now,
                                      self.deadline.notice_s(self.slowest_s), limit))
        self._flights.append(_Flight(rows, self._threads.submit(self._timed, batch, descriptions), self._calls, now,
                                     limit, key))

    def collect(self, answer: Answer, block: bool = False, also: Iterable[Future[Any]] = ()) -> None:
        """Hand finished calls to ``answer`` in the order they were made; ``block`` waits for one first.

        ``also``: other futures that end the wait too (the rollout's background resets). A call past its
        deadline raises ``CallOverdue``.
        """
        if block and self._flights:
            due = min(f.started + f.limit_s for f in self._flights)
            wait([f.future for f in self._flights] + list(also), return_when=FIRST_COMPLETED,
                 timeout=max(0.0, due - time.perf_counter()))
        elif block:
            wait(list(also), return_when=FIRST_COMPLETED)
        if not self._flights:
            return
        done = [f for f in self._flights if f.future.done()]
        self._flights = [f for f in self._flights if not f.future.done()]
        for flight in done:
            WAITING.remove(flight.waiting_key)
            exc = flight.future.exception()
            answer(flight.rows, None if exc is not None else flight.future.result(), exc)
        now = time.perf_counter()
        for flight in self._flights:
            if now - flight.started >= flight.limit_s:
                self._hung = True
                raise CallOverdue(flight.rows, flight.number, now - flight.started, flight.limit_s,
                                  self.deadline.source(), thread_stack(getattr(flight.future, "thread_ident", None)))

    def close(self) -> None:
        """Wait for calls in flight within their deadline (results dropped); abandon a hung one (idempotent)."""
        if not self._hung:
            self.take_check()  # probes may still run on twins of the policy: done (and counted) before it closes
            for flight in self._flights:
                wait([flight.future], timeout=max(0.0, flight.started + flight.limit_s - time.perf_counter()))
        settled = all(flight.future.done() for flight in self._flights)
        for flight in self._flights:
            WAITING.remove(flight.waiting_key)
        threads, self._threads, self._flights = self._threads, None, []
        if threads is not None:
            threads.stop(join=settled)  # every call returned: the threads end at once; else one hangs: abandoned
