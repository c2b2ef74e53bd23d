"""The Ray executor: work units as Ray tasks that build their own simulator and policy on the node.

Ray does the scheduling, the placement (``num_cpus=1``, ``--ray-gpus-per-worker``), the object
transfer and the retries of tasks whose worker died (``max_retries``); lerobench only submits units
and hands each returned record to the sink as its task completes. A unit whose task still fails after
Ray's retries becomes error records; an error the policy raised stops the run as with every executor.
Nothing here outlives ``run``: pending tasks are cancelled and ``ray.shutdown`` runs in ``finally``
(a Ray this process did not start, e.g. a test's, is left connected).
"""

from __future__ import annotations

import math
import signal
import threading
import uuid
from typing import TYPE_CHECKING, Any

from lerobench.errors import LerobenchError, MissingDependencyError, RunError
from lerobench.plan.planner import RunPlan, WorkUnit

if TYPE_CHECKING:
    from lerobench.execution.base import ExecutionChoice, RunIO
    from lerobench.execution.compute import ComputeBudget
    from lerobench.policies.base import Policy

RAY_RETRIES = 2
"""Times Ray reruns a unit whose worker process died (episodes are pure functions: a rerun is identical)."""


WAIT_SLICE_S = 0.5
"""Longest ``ray.wait`` between two chances for a signal handler to run in the main thread."""


class RayExecutor:
    """Submits every unit as one Ray task; at most ``workers`` in flight (0: all, or one per CPU under ``--until``)."""

    name = "ray"

    def __init__(self, address: str | None = None, gpus_per_worker: float = 0.0, workers: int = 0,
                 budget: ComputeBudget | None = None):
        try:  # refused before the run starts (an ImportError in run() would be a traceback after results.json)
            import ray  # noqa: F401 - imported again where used; here only to fail early
        except ImportError as exc:
            raise MissingDependencyError(f"--executor ray needs Ray: pip install 'lerobench[ray]' ({exc})") from exc
        self.address = address
        self.gpus_per_worker = gpus_per_worker
        self.workers = workers
        if budget is None:
            from lerobench.execution.compute import standalone_budget

            budget = standalone_budget(self.name, workers)
        self.budget = budget

    @classmethod
    def create(cls, plan: RunPlan, choice: ExecutionChoice, policy: Policy) -> RayExecutor:
        """Registry factory (``core/executors.py``): each Ray task builds its own policy."""
        s = plan.settings
        return cls(s.ray_address, s.ray_gpus_per_worker, choice.workers, choice.compute)

    def run(self, plan: RunPlan, units: list[WorkUnit], io: RunIO) -> None:
        """Run ``units`` on Ray; stream each unit's records to the sink as it completes."""
        import ray

        from lerobench.execution.worker import run_unit_in_ray

        started = not ray.is_initialized()
        if started:
            handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            for sig, handler in handlers.items():  # Ray's core worker installs its own: keep the CLI's cleanup
                if handler is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(sig, handler)
        in_flight: dict[Any, WorkUnit] = {}
        try:
            resources = ray.cluster_resources()
            units = _split(units, int(resources.get("CPU", 1)))
            remote = ray.remote(run_unit_in_ray).options(
                num_cpus=1, num_gpus=self.gpus_per_worker, max_retries=RAY_RETRIES, retry_exceptions=False)
            key = uuid.uuid4().hex  # workers rebuild policy and env once per run, not once per unit
            pending = list(reversed(units))
            limit = self.workers or (_slots(resources, self.gpus_per_worker) if io.stopping.active else len(units))
            while pending or in_flight:
                while pending and len(in_flight) < limit:
                    unit = pending.pop()
                    if not any(io.wants(unit.task.name, e) for e in unit.episodes):
                        continue  # --until decided its task: never started
                    io.task_started(unit.task)
                    in_flight[remote.remote(plan, unit, key, self.budget)] = unit
                if not in_flight:  # --until decided every pending unit away
                    continue
                ready = _wait(ray, list(in_flight))
                for ref in ready:
                    unit = in_flight.pop(ref)
                    records = self._records(plan, unit, ref)
                    if records is None:  # Ray gave up on a chunk: rerun its episodes one by one to find the culprit
                        pending += [WorkUnit(unit.task, (e,)) for e in reversed(unit.episodes)]
                        continue
                    for record in records:
                        io.episode(unit.task, record, count_steps=True)
        finally:
            if started:
                ray.shutdown()  # stops the local Ray and every worker in it
            else:  # a cluster we only joined: stop our tasks there, leave the cluster up
                for ref in in_flight:
                    ray.cancel(ref, force=True)

    @staticmethod
    def _records(plan: RunPlan, unit: WorkUnit, ref: Any) -> list[Any] | None:
        """The unit's records; an error record if Ray gave up on a one-episode unit (None: a bigger one).

        An error the policy raised is re-raised (it stops the run, as with every executor).
        """
        import ray
        from ray.exceptions import RayTaskError

        try:
            return ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, LerobenchError):
                raise cause from None
            raise RunError(f"suite {plan.suite.name!r}, task {unit.task.name!r}, episodes {list(unit.episodes)}: "
                           f"{cause or exc}") from exc
        except ray.exceptions.RayError as exc:  # worker or node died after Ray's retries
            if len(unit.episodes) > 1:
                return None
            message = f"worker failure: Ray task failed after {RAY_RETRIES} retries ({type(exc).__name__})"
            return [plan.error_record(unit.task, unit.episodes[0], message)]


def _split(units: list[WorkUnit], cpus: int) -> list[WorkUnit]:
    """Split per-task units into chunks, about 3 per CPU.

    Every CPU gets work, yet a task's env is built a few times rather than once per episode (a Ray
    worker keeps its last task's env).
    """
    todo = sum(len(u.episodes) for u in units)
    size = max(1, math.ceil(todo / (3 * max(1, cpus))))
    return [WorkUnit(u.task, u.episodes[i:i + size]) for u in units for i in range(0, len(u.episodes), size)]


def _slots(resources: dict[str, float], gpus_per_worker: float) -> int:
    """Units the cluster can run at once (one CPU each, and ``gpus_per_worker`` GPUs each).

    Under ``--until`` only this many are submitted at a time: a unit submitted is a unit run (Ray queues it),
    so submitting every unit up front ran and recorded a decided task's episodes to the cap.
    """
    slots = int(resources.get("CPU", 1))
    if gpus_per_worker > 0:
        slots = min(slots, int(resources.get("GPU", 0) / gpus_per_worker))
    return max(1, slots)


def _wait(ray: Any, refs: list[Any]) -> list[Any]:
    """``ray.wait`` for one ready ref, re-raising a signal handler's exception (SIGTERM -> ``Terminated``).

    An exception raised by a Python signal handler while Ray's Cython ``wait`` runs comes back as a
    ``SystemError`` whose cause is that exception; the CLI's cleanup expects the exception itself.
    """
    while True:  # in slices: a wait for a task whose raylet was killed with us (SIGTERM to the process group)
        try:      # never returns, and the handler's exception only lands between slices
            ready, _ = ray.wait(refs, num_returns=1, timeout=WAIT_SLICE_S)
        except SystemError as exc:
            if isinstance(exc.__cause__, BaseException) and not isinstance(exc.__cause__, Exception):
                raise exc.__cause__ from None
            raise
        if ready:
            return ready
