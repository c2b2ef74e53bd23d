"""The processes executor: N worker processes, each running whole episodes with its own policy and simulator.

No per-step IPC: a worker receives a work unit, runs it in-process and sends one message per
finished episode. Right for policies that are cheap to replicate (state-only, scripted, small CPU
models, ``ws://`` clients). A worker that dies costs only the episode it was running (an error
record); the rest of its unit is handed to a fresh worker. On any exception, Ctrl-C included, every
worker is terminated and joined before ``run`` returns.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from traceback import format_exception
from typing import TYPE_CHECKING, Any

from lerobench import environment
from lerobench.errors import LerobenchError, PolicyError, RunError
from lerobench.execution.base import MAX_WORKER_REBUILDS, RunIO
from lerobench.output.video_recorder import remove_partial_videos
from lerobench.plan.planner import RunPlan, WorkUnit
from lerobench.rollout.deadline import WAITING
from lerobench.streams import tolerate_gone_readers

if TYPE_CHECKING:
    from lerobench.execution.base import ExecutionChoice
    from lerobench.execution.compute import ComputeBudget
    from lerobench.policies.base import Policy

START_METHOD = "forkserver"
"""Workers start from a clean server process: no inherited GL contexts, torch threads or locks."""


def _worker_main(conn: Connection, plan: RunPlan, budget: ComputeBudget, environ: dict[str, str]) -> None:
    """Worker process: build the runner, then run units until the driver sends None or goes away.

    ``environ`` is the driver's environment when the run started: a forkserver started earlier in the process
    (an earlier run, ``lerobench.evaluate`` in a loop) holds the environment of its own start, and a policy
    factory reading a variable set since (a checkpoint path) must see what the driver sees.
    """
    environment.adopt(environ)
    tolerate_gone_readers()  # `lerobench eval | head`: a print here must not stop this worker's episodes
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and terminates us
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # ... with SIGTERM: unwind, so videos in progress are deleted
    sys.unraisablehook = _stop_in_a_finalizer(sys.unraisablehook)
    from lerobench.execution.worker import UnitRunner

    budget.enter_worker()  # its share of render threads and call cores, in its own process
    runner = None
    sending = threading.Lock()  # the episodes (this thread) and the late-call notices (a daemon thread)

    def send(message: tuple[str, Any]) -> None:
        with sending:
            conn.send(message)

    threading.Thread(target=_relay_waiting_calls, args=(send,), name="lerobench-waiting-relay", daemon=True).start()
    try:
        runner = UnitRunner(plan)
        while (unit := conn.recv()) is not None:
            runner.run(unit, lambda record: send(("episode", record)))
            send(("done", None))
    except (EOFError, BrokenPipeError):
        pass
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, which stops the run
        kind = "policy" if isinstance(exc, PolicyError) else "run"
        message = str(exc) if isinstance(exc, LerobenchError) else f"{type(exc).__name__}: {exc}"
        failure = exc.failure if isinstance(exc, PolicyError) else None
        text = (exc.traceback_text if isinstance(exc, PolicyError) else None) or "".join(format_exception(exc))
        try:
            conn.send(("error", (kind, message, failure, text)))
        except OSError:
            pass
    finally:
        if runner is not None:
            runner.close()


def _relay_waiting_calls(send: Any) -> None:
    """Tell the driver when a policy call here is late (and when none is): its progress line names it."""
    from lerobench.rollout.deadline import WAITING

    said: str | None = None
    while True:
        time.sleep(1.0)
        notice = WAITING.notice()
        if notice != said:
            try:
                send(("waiting", notice))
            except OSError:
                return
            said = notice


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    """Unwind once: a second SIGTERM is ignored so it cannot raise inside the cleanup the first one started.

    Both come on an interrupt: the process group's, then the driver's ``terminate`` (a renderer's ``__del__``
    printed a traceback). A worker that does not end is killed by the driver after its wait.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _stop_in_a_finalizer(previous: Callable[[Any], Any]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` for a worker: a stop that landed inside a finalizer ends the process, quietly.

    Why: the SIGTERM above raises wherever the worker is; inside a ``__del__`` (robosuite's
    ``MjRenderContext.__del__``) Python cannot raise it, prints "Exception ignored in ... SystemExit: 143" into
    the failed run's log and goes on, until the driver kills the worker. The driver removes partial videos of
    killed workers, so exiting at once loses nothing. Any other unraisable exception is reported as before.
    """

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, SystemExit):
            os._exit(unraisable.exc_value.code if isinstance(unraisable.exc_value.code, int) else 1)
        previous(unraisable)

    return hook


@dataclass
class _Worker:
    process: Any
    conn: Connection
    unit: WorkUnit | None = None
    reported: set[int] = field(default_factory=set)
    """Episodes of ``unit`` whose every line arrived (the last trial, or the error that ended them)."""
    trials_in: dict[int, int] = field(default_factory=dict)
    """Trial lines that arrived per episode of ``unit``: where a death cut an episode between its lines."""
    task: str | None = None
    """The task whose env this worker holds (building another costs ~0.5 s on Meta-World, 10 s on LIBERO)."""


def _next_unit(pending: deque[WorkUnit], worker: _Worker, pool: list[_Worker]) -> WorkUnit:
    """Task-affine pick: the worker's own task first, then a task nobody holds, then any (in queue order).

    Workers then build about one env per task (plus one per worker at the tail) instead of one per task
    per worker; the order cannot change outcomes, which depend only on (seed, task, episode).
    """
    held = {w.task for w in pool if w is not worker}
    for prefer in (lambda u: u.task.name == worker.task, lambda u: u.task.name not in held, lambda u: True):
        for unit in pending:
            if prefer(unit):
                pending.remove(unit)
                return unit
    raise IndexError("no pending unit")


class ProcessExecutor:
    """Runs single-episode units on ``workers`` processes pulling from one queue."""

    name = "processes"

    def __init__(self, workers: int, budget: ComputeBudget | None = None):
        from lerobench.execution.compute import standalone_budget

        self.workers = workers
        self.budget = budget or standalone_budget(self.name, workers)

    @classmethod
    def create(cls, plan: RunPlan, choice: ExecutionChoice, policy: Policy) -> ProcessExecutor:
        """Registry factory (``core/executors.py``): each worker builds its own policy, ``policy`` is unused."""
        return cls(choice.workers, choice.compute)

    def run(self, plan: RunPlan, units: list[WorkUnit], io: RunIO) -> None:
        """Hand units to idle workers until every episode is recorded; terminate workers on the way out."""
        from lerobench.envs.start import from_lerobench_entry_point
        from lerobench.envs.vector import preload_forkserver

        preload_forkserver(plan.suite.backend)
        context: Any = multiprocessing.get_context(START_METHOD)  # the typeshed's BaseContext lacks Process
        pending = deque(units)
        pool: list[_Worker] = []
        deaths: dict[str, int] = {}

        def spawn() -> _Worker:
            parent, child = context.Pipe()
            process = context.Process(target=_worker_main,
                                      args=(child, plan, self.budget, environment.snapshot()),
                                      name="lerobench-episode-worker", daemon=True)
            with from_lerobench_entry_point():  # never the caller's unguarded script again (envs/start.py)
                process.start()
            child.close()
            return _Worker(process, parent)

        try:
            pool = [spawn() for _ in range(min(self.workers, len(units)))]
            while pending or any(w.unit is not None for w in pool):
                for unit in [u for u in pending if not any(io.wants(u.task.name, e) for e in u.episodes)]:
                    pending.remove(unit)  # --until decided its task: never started
                for i, w in enumerate(pool):
                    if w.unit is None and pending:
                        unit = pending.popleft() if plan.interleaved else _next_unit(pending, w, pool)
                        w.unit, w.reported, w.trials_in = unit, set(), {}
                        w.task = w.unit.task.name
                        io.task_started(w.unit.task)
                        try:
                            w.conn.send(w.unit)
                        except OSError:  # died while idle: its unit never started, hand it to a fresh worker
                            pending.appendleft(w.unit)
                            w.process.join(timeout=5)
                            w.conn.close()
                            pool[i] = spawn()
                busy = [w for w in pool if w.unit is not None]
                if not busy:  # --until decided every pending unit away: nothing left to wait for
                    continue
                ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                for w in busy:
                    if w.conn in ready or w.process.sentinel in ready:
                        if not self._drain(w, io):
                            pool[pool.index(w)] = self._replace(plan, w, pending, deaths, io, spawn)
        finally:
            _stop_all(pool)
            for w in pool:
                WAITING.relay(id(w), None)
            remove_partial_videos(plan.output)  # of workers that were killed (OOM) and could not unwind

    def _drain(self, w: _Worker, io: RunIO) -> bool:
        """Take every message ``w`` sent; False when its process has died."""
        try:
            while w.conn.poll():
                kind, payload = w.conn.recv()
                if kind == "episode":
                    assert w.unit is not None, "an episode arrived from a worker with no unit"
                    w.trials_in[payload.episode] = payload.trial + 1
                    if payload.error is not None or payload.trial + 1 == io.sink.plan.settings.trials_per_episode:
                        w.reported.add(payload.episode)
                    io.episode(w.unit.task, payload, count_steps=True)
                elif kind == "waiting":
                    WAITING.relay(id(w), payload)
                elif kind == "done":
                    w.unit = None
                    return True
                else:
                    error, message, failure, text = payload
                    raise PolicyError(message, failure, text) if error == "policy" else RunError(message)
        except (EOFError, OSError):
            WAITING.relay(id(w), None)
            return False
        return w.process.is_alive()

    def _replace(self, plan: RunPlan, w: _Worker, pending: deque[WorkUnit], deaths: dict[str, int],
                 io: RunIO, spawn: Any) -> _Worker:
        """Record the dead worker's running episode as an error, requeue the rest of its unit, start another.

        The error line is the running episode's next trial (its earlier trials' lines may have arrived).
        """
        w.process.join(timeout=5)
        unit = w.unit
        assert unit is not None
        left = [e for e in unit.episodes if e not in w.reported]
        message = f"worker failure: episode worker process died (exit code {w.process.exitcode})"
        if not left:  # died after its last episode, before saying "done": nothing was lost
            w.conn.close()
            return spawn()
        io.episode(unit.task, plan.error_record(unit.task, left[0], message, trial=w.trials_in.get(left[0], 0)))
        if left[1:]:
            pending.appendleft(WorkUnit(unit.task, tuple(left[1:])))
        deaths[unit.task.name] = deaths.get(unit.task.name, 0) + 1
        if deaths[unit.task.name] > MAX_WORKER_REBUILDS:
            raise RunError(f"suite {plan.suite.name!r}, task {unit.task.name!r}: episode workers died "
                           f"{deaths[unit.task.name]} times (last: {message}); stopping")
        io.reporter.message(f"task {unit.task.name!r}: {message}; episode {left[0]} recorded as an error, "
                              f"starting another worker")
        w.conn.close()
        return spawn()


def _stop_all(pool: list[_Worker]) -> None:
    """Ask idle workers to exit, terminate busy ones, join all (kill any that do not stop)."""
    for w in pool:
        try:
            if w.unit is None and w.process.is_alive():
                w.conn.send(None)
            else:
                w.process.terminate()
        except OSError:
            w.process.terminate()
    for w in pool:
        w.process.join(timeout=10)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(timeout=5)
        w.conn.close()
